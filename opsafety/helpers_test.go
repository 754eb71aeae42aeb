package opsafety

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider/providertest"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// station is one operator's machine: a tilectl database, a configured
// (default) cache dir, an FDR file, and a provider.
type station struct {
	t     *testing.T
	bin   string
	dbURL string
	cache string
	fdr   string
	prov  *providertest.Provider
	env   []string
}

func newStation(t *testing.T, prov *providertest.Provider) *station {
	t.Helper()
	root := t.TempDir()
	s := &station{t: t, bin: testbin.Tilectl(t), dbURL: pgtest.NewURL(t), cache: filepath.Join(root, "cache"),
		fdr: filepath.Join(root, "fdr.ring"), prov: prov, env: testbin.Environ("XDG_", "HOME=")}
	s.env = append(s.env, "HOME="+root, "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"TILECTL_DATABASE_URL="+s.dbURL, "TILECTL_CACHE_DIR="+s.cache, "TILECTL_FDR_PATH="+s.fdr,
		"TILECTL_PROVIDER_URL="+prov.URL, "TILECTL_PROVIDER_TOKEN="+providertest.Token)
	s.mustRun("migrate", "up")
	return s
}

type result struct {
	exit           int
	stdout, stderr string
}

func (s *station) run(args ...string) result {
	s.t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(s.bin, args...)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if took := testbin.RunFor(s.t, cmd, 2*time.Minute); took >= 2*time.Minute {
		s.t.Fatalf("tilectl %s: timed out", strings.Join(args, " "))
	}
	return result{exit: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func (s *station) mustRun(args ...string) result {
	s.t.Helper()
	r := s.run(args...)
	if r.exit != 0 {
		s.t.Fatalf("tilectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.exit, r.stdout, r.stderr)
	}
	return r
}

// importFlight writes n valid PNG tiles (z 10, x 0..n-1, y 7) into a new
// directory, imports it as flight with extra leading args, and lands the
// flight. It returns the directory (the aircraft's original).
func (s *station) importFlight(flight string, n int, extra ...string) string {
	s.t.Helper()
	dir := s.t.TempDir()
	for i := range n {
		testbin.WriteTile(s.t, dir, i, uint8(i))
	}
	s.mustRun(append(extra, "tiles", "import", "--flight", flight, dir)...)
	return dir
}

func tileID(flight string, i int) string { return fmt.Sprintf("%s-10-%d-7", flight, i) }

// blobPath is where the station's cache keeps tile 10/i/7 of flight.
func (s *station) blobPath(flight string, i int) string {
	return filepath.Join(s.cache, flight, "10", strconv.Itoa(i), "7.png")
}

type tileRow struct {
	Status   string
	Attempts int
}

// tiles reads every tile's status and attempts (the test's own view; the
// operator never needs SQL).
func (s *station) tiles(flight string) map[string]tileRow {
	s.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT tile_id, voting_status, upload_attempts FROM tiles WHERE flight_id = $1`, flight)
	out := map[string]tileRow{}
	var id string
	var r tileRow
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.Status, &r.Attempts}, func() error { out[id] = r; return nil }); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// heldByProvider is the set of tile IDs the provider holds.
func (s *station) heldByProvider() map[string]bool {
	s.t.Helper()
	held := map[string]bool{}
	for _, tl := range s.prov.Ledger(s.t).Tiles {
		held[tl.TileID] = true
	}
	return held
}

// uploadJSON runs upload-pending -o json and decodes its summary.
func (s *station) uploadJSON(args ...string) (result, map[string]any) {
	s.t.Helper()
	r := s.run(append([]string{"upload-pending", "-o", "json"}, args...)...)
	var sum map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
		s.t.Fatalf("upload-pending -o json printed no summary (exit %d): %v\nstdout: %s\nstderr: %s", r.exit, err, r.stdout, r.stderr)
	}
	return r, sum
}
