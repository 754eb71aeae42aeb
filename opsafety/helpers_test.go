package opsafety

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/internal/teststation"
	"github.com/tilectl/tilectl/provider/providertest"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// station is one operator's machine: a tilectl database, a configured
// (default) cache dir, an FDR file, and a provider.
type station struct {
	*teststation.Station
	prov *providertest.Provider
}

type result = teststation.Result

func newStation(t *testing.T, prov *providertest.Provider) *station {
	t.Helper()
	return &station{Station: teststation.New(t, prov.URL), prov: prov}
}

// importFlight writes n valid PNG tiles (z 10, x 0..n-1, y 7) into a new
// directory, imports it as flight with extra leading args, and lands the
// flight. It returns the directory (the aircraft's original).
func (s *station) importFlight(flight string, n int, extra ...string) string {
	s.T.Helper()
	dir := s.T.TempDir()
	for i := range n {
		testbin.WriteTile(s.T, dir, i, uint8(i))
	}
	s.MustRun(append(extra, "tiles", "import", "--flight", flight, dir)...)
	return dir
}

func tileID(flight string, i int) string { return fmt.Sprintf("%s-10-%d-7", flight, i) }

// blobPath is where the station's cache keeps tile 10/i/7 of flight.
func (s *station) blobPath(flight string, i int) string {
	return filepath.Join(s.Cache, flight, "10", strconv.Itoa(i), "7.png")
}

type tileRow struct {
	Status   string
	Attempts int
}

// tiles reads every tile's status and attempts (the test's own view; the
// operator never needs SQL).
func (s *station) tiles(flight string) map[string]tileRow {
	s.T.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.DB)
	if err != nil {
		s.T.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT tile_id, voting_status, upload_attempts FROM tiles WHERE flight_id = $1`, flight)
	out := map[string]tileRow{}
	var id string
	var r tileRow
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.Status, &r.Attempts}, func() error { out[id] = r; return nil }); err != nil {
		s.T.Fatal(err)
	}
	return out
}

// heldByProvider is the set of tile IDs the provider holds.
func (s *station) heldByProvider() map[string]bool {
	s.T.Helper()
	held := map[string]bool{}
	for _, tl := range s.prov.Ledger(s.T).Tiles {
		held[tl.TileID] = true
	}
	return held
}

// uploadJSON runs upload-pending -o json and decodes its summary.
func (s *station) uploadJSON(args ...string) (result, map[string]any) {
	s.T.Helper()
	r := s.Run(append([]string{"upload-pending", "-o", "json"}, args...)...)
	var sum map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &sum); err != nil {
		s.T.Fatalf("upload-pending -o json printed no summary (exit %d): %v\nstdout: %s\nstderr: %s", r.Exit, err, r.Stdout, r.Stderr)
	}
	return r, sum
}
