package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// zoomFlight imports a flight with tiles at zooms 9, 10 and 11 (6, 12 and
// 24 of them). Tile IDs are <flight>-<z>-<x>-<y>, so their byte order puts
// zoom 10 and 11 before 9, and x=10 before x=2: ID order is not zoom
// order. It returns each tile's zoom by ID.
func (s *site) zoomFlight(id string) map[string]int {
	s.t.Helper()
	dir := filepath.Join(s.t.TempDir(), id)
	zoom := map[string]int{}
	for z, n := range map[int]int{9: 6, 10: 12, 11: 24} {
		for x := range n {
			testbin.WriteTileAt(s.t, dir, z, x, 3, uint8(z))
			zoom[fmt.Sprintf("%s-%d-%d-3", id, z, x)] = z
		}
	}
	s.mustRun("tiles", "import", "--flight", id, "--state", "on_ground", dir)
	return zoom
}

// sorted returns the flight's tile IDs in the order order names: zoom
// then tile ID, or tile ID alone; tile IDs compare byte by byte.
func sorted(zoom map[string]int, order string) []string {
	ids := make([]string, 0, len(zoom))
	for id := range zoom {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if order == "zoom" && zoom[a] != zoom[b] {
			return zoom[a] - zoom[b]
		}
		return strings.Compare(a, b)
	})
	return ids
}

// received lists the tiles the provider stored for the flight, in the
// order it wrote them.
func received(t *testing.T, p *providertest.Provider, flight string) []string {
	t.Helper()
	rows, err := p.Pool.Query(context.Background(),
		`SELECT tile_id FROM provider_tile_writes WHERE flight_id = $1 ORDER BY id`, flight)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// upload-pending sends a flight lowest zoom first, then by tile ID, by
// default; --order id (or TILECTL_UPLOAD_ORDER=id) sends it by tile ID
// alone. The reference provider's write log is the order it received
// them in (one batch in flight, so it is the claim order).
func TestUploadPendingSendsTheOverviewFirstAndByIDWhenAsked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		order string
		args  []string
		env   []string
	}{
		{"zoom", nil, nil},
		{"id", []string{"--order", "id"}, nil},
		{"id", nil, []string{"TILECTL_UPLOAD_ORDER=id"}},
	} {
		name := tc.order + "/" + strings.Join(append(slices.Clone(tc.args), tc.env...), ",")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prov := providertest.Start(t, func(c *provider.Config) { c.Token = token })
			s := newSite(t, prov.URL)
			s.env = append(s.env, tc.env...)
			zoom := s.zoomFlight("zo1")
			want := sorted(zoom, tc.order)
			if slices.Equal(want, sorted(zoom, "id")) == (tc.order == "zoom") {
				t.Fatal("the flight's zoom order and ID order agree: the test would prove nothing")
			}
			s.mustRun(append([]string{"upload-pending", "--flight", "zo1", "--concurrency", "1", "--batch-size", "5"}, tc.args...)...)
			if got := received(t, prov, "zo1"); !slices.Equal(got, want) {
				t.Fatalf("the provider received\n %q\nwant (%s order)\n %q", got, tc.order, want)
			}
		})
	}
}

// Two upload-pending processes share a flight, two batches in flight
// each: no tile reaches the provider after more tiles of a higher zoom
// than could have been in flight beside it (the processes' batches of
// the moment), so each zoom is claimed before the next; by tile ID the
// flight's last zoom would come after whole higher zooms.
func TestTwoProcessesSendTheOverviewFirst(t *testing.T) {
	t.Parallel()
	prov := providertest.Start(t, func(c *provider.Config) { c.Token = token })
	s := newSite(t, prov.URL)
	zoom := s.zoomFlight("zo2")
	const procs, concurrency, batch = 2, 2, 3
	var wg sync.WaitGroup
	results := make([]result, procs)
	for i := range procs {
		wg.Go(func() {
			results[i] = s.run(time.Minute, "upload-pending", "--flight", "zo2",
				"--concurrency", itoa(concurrency), "--batch-size", itoa(batch))
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.exit != 0 {
			t.Fatalf("process %d: exit %d\nstdout: %s\nstderr: %s", i, r.exit, r.stdout, r.stderr)
		}
	}
	got := received(t, prov, "zo2")
	if len(got) != len(zoom) {
		t.Fatalf("the provider stored %d tiles, want %d", len(got), len(zoom))
	}
	inFlight := procs * concurrency * batch
	for i, id := range got {
		higher := 0
		for _, before := range got[:i] {
			if zoom[before] > zoom[id] {
				higher++
			}
		}
		if higher > inFlight {
			t.Errorf("tile %s (zoom %d) reached the provider after %d tiles of higher zooms, more than the %d that can be in flight",
				id, zoom[id], higher, inFlight)
		}
	}
}

// status --flight F shows how far each zoom level is, in text and JSON,
// from the real binary's database: uploaded of total, what is still to
// send and what was given up. Without --flight there are no levels.
func TestStatusShowsAFlightsProgressPerZoomLevel(t *testing.T) {
	t.Parallel()
	const poison = "zo3-10-4-3"
	prov := providertest.Start(t, func(c *provider.Config) {
		c.Token, c.Faults = token, provider.FaultConfig{RejectTileIDs: []string{poison}}
	})
	s := newSite(t, prov.URL)
	s.zoomFlight("zo3")
	if r := s.run(time.Minute, "upload-pending", "--flight", "zo3", "--max-per-tile-attempts", "1"); r.exit != 3 {
		t.Fatalf("upload: exit %d, want 3 (one tile given up)\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	more := filepath.Join(t.TempDir(), "zo3")
	testbin.WriteTileAt(t, more, 12, 0, 0, 1)
	testbin.WriteTileAt(t, more, 12, 1, 0, 1)
	s.mustRun("tiles", "import", "--flight", "zo3", "--state", "on_ground", more)

	r := s.mustRun("status", "--flight", "zo3", "-o", "json")
	var rep struct {
		Flights []struct {
			Zooms []map[string]int64 `json:"zooms"`
		} `json:"flights"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Flights) != 1 {
		t.Fatalf("status -o json: %v\n%s", err, r.stdout)
	}
	want := []map[string]int64{
		{"z": 9, "uploaded": 6, "total": 6, "pending": 0, "given_up": 0},
		{"z": 10, "uploaded": 11, "total": 12, "pending": 0, "given_up": 1},
		{"z": 11, "uploaded": 24, "total": 24, "pending": 0, "given_up": 0},
		{"z": 12, "uploaded": 0, "total": 2, "pending": 2, "given_up": 0},
	}
	if got := rep.Flights[0].Zooms; !reflect.DeepEqual(got, want) {
		t.Errorf("zooms %v, want %v", got, want)
	}

	text := s.mustRun("status", "--flight", "zo3").stdout
	for _, row := range [][]string{
		{"ZOOM", "UPLOADED", "PENDING", "GIVEN", "UP", "DONE"},
		{"9", "6", "/", "6", "0", "0", "100%"},
		{"10", "11", "/", "12", "0", "1", "91%"},
		{"12", "0", "/", "2", "2", "0", "0%"},
	} {
		if !slices.ContainsFunc(strings.Split(text, "\n"), func(l string) bool { return slices.Equal(strings.Fields(l), row) }) {
			t.Errorf("status --flight has no row %q:\n%s", row, text)
		}
	}
	if all := s.mustRun("status", "-o", "json").stdout; strings.Contains(all, `"zooms"`) {
		t.Errorf("status without --flight lists zoom levels:\n%s", all)
	}
}

// A batch of the lowest zoom that the provider fails (a 400: the key can
// never succeed) ends the run; the next run sends it again, after the
// lookup its tiles await, before any tile of a higher zoom: the
// provider's write log is still the whole flight in zoom order.
func TestAFailedLowZoomBatchIsSentAgainBeforeHigherZooms(t *testing.T) {
	t.Parallel()
	prov := providertest.Start(t, func(c *provider.Config) { c.Token = token })
	target, err := url.Parse(prov.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	posts, failed := 0, ""
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tiles:batch") {
			mu.Lock()
			posts++
			second := posts == 2
			if second {
				failed = r.Header.Get("Idempotency-Key")
			}
			mu.Unlock()
			if second {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"error":{"code":"INVALID_REQUEST","message":"refused once by the test"}}`))
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	s := newSite(t, front.URL)
	zoom := s.zoomFlight("zo4")
	upload := []string{"upload-pending", "--flight", "zo4", "--concurrency", "1", "--batch-size", "3"}
	if r := s.run(time.Minute, upload...); r.exit != 1 {
		t.Fatalf("upload with a batch refused: exit %d, want 1 (a failed batch ends the run)\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	s.mustRun(upload...)
	mu.Lock()
	if failed == "" {
		t.Fatal("no batch was refused: the test proves nothing")
	}
	mu.Unlock()
	want := sorted(zoom, "zoom")
	if got := received(t, prov, "zo4"); !slices.Equal(got, want) {
		t.Fatalf("the provider received\n %q\nwant the zoom order, the refused zoom-9 batch before zoom 10\n %q", got, want)
	}
}
