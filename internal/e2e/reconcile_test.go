package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// reconcileJSON is the part of `tiles reconcile -o json` the tests read.
type reconcileJSON struct {
	Outcome          string  `json:"outcome"`
	ExitCode         int     `json:"exit_code"`
	Total            int     `json:"total"`
	Checked          int     `json:"checked"`
	ResumedChecked   int     `json:"resumed_checked"`
	ResumedAfter     *string `json:"resumed_after"`
	Held             int     `json:"held"`
	Lacks            int     `json:"lacks"`
	HoldsOther       int     `json:"holds_other"`
	Unclear          int     `json:"unclear"`
	Requeued         *int    `json:"requeued"`
	LookupsWindowMin int     `json:"lookups_window_min"`
	Tiles            []struct {
		TileID  string `json:"tile_id"`
		Verdict string `json:"verdict"`
	} `json:"tiles"`
	Error *string `json:"error"`
}

func decodeReconcile(t *testing.T, r result) reconcileJSON {
	t.Helper()
	var out reconcileJSON
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("reconcile -o json: stdout is not one JSON object: %v\nstdout: %s\nstderr: %s", err, r.stdout, r.stderr)
	}
	if dec.More() {
		t.Fatalf("reconcile -o json printed more than one object:\n%s", r.stdout)
	}
	if out.ExitCode != r.exit {
		t.Fatalf("exit_code %d in JSON, process exited %d", out.ExitCode, r.exit)
	}
	return out
}

// lookupGate wraps the reference provider's handler: it counts tile
// lookups, answers some with 503 (fail503 decides), and can hold lookups
// once a number of them has been answered.
type lookupGate struct {
	next    http.Handler
	lookups atomic.Int64
	served  atomic.Int64 // 503s served
	// fail503 and holdAt are set by a test while the rig's server runs.
	fail503 atomic.Pointer[func(n int64) bool]
	holdAt  atomic.Int64 // hold every lookup past this many (0: never)
	// paths are the distinct lookup paths served since recordPaths (nil:
	// not recording).
	pathsMu sync.Mutex
	paths   map[string]bool
	gate    chan struct{}
	once    sync.Once
}

func (g *lookupGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/tiles/") {
		n := g.lookups.Add(1)
		g.pathsMu.Lock()
		if g.paths != nil {
			g.paths[r.URL.Path] = true
		}
		g.pathsMu.Unlock()
		if at := g.holdAt.Load(); at > 0 && n > at {
			select {
			case <-g.gate:
			case <-r.Context().Done():
				return
			}
		}
		if f := g.fail503.Load(); f != nil && (*f)(n) {
			g.served.Add(1)
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"UNAVAILABLE","message":"busy"}}`))
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

func (g *lookupGate) release() { g.once.Do(func() { close(g.gate) }) }

// recordPaths starts recording the distinct lookup paths served.
func (g *lookupGate) recordPaths() {
	g.pathsMu.Lock()
	g.paths = map[string]bool{}
	g.pathsMu.Unlock()
}

// pathsSeen is how many distinct lookup paths were served since recordPaths.
func (g *lookupGate) pathsSeen() int64 {
	g.pathsMu.Lock()
	defer g.pathsMu.Unlock()
	return int64(len(g.paths))
}

// reconcileRig is a site with a flight of n tiles uploaded to the
// reference provider, served through a lookupGate.
type reconcileRig struct {
	*site
	prov *providertest.Provider
	gate *lookupGate
	ids  []string
}

func newReconcileRig(t *testing.T, flight string, n int) *reconcileRig {
	t.Helper()
	prov := providertest.Start(t, func(c *provider.Config) { c.Token = token; c.SkipFsync = true })
	g := &lookupGate{next: prov.Server.Handler(), gate: make(chan struct{})}
	hs := httptest.NewServer(g)
	t.Cleanup(hs.Close)
	t.Cleanup(g.release)
	s := newSite(t, hs.URL)
	rig := &reconcileRig{site: s, prov: prov, gate: g}
	rig.ids = rig.bigFlight(flight, n)
	s.mustRun("upload-pending", "--flight", flight, "--quiet")
	return rig
}

// bigFlight is site.flight for more tiles than zoom 10 has columns: tile
// i >= 1024 is put at zoom 12.
func (rg *reconcileRig) bigFlight(id string, n int) []string {
	rg.t.Helper()
	dir := filepath.Join(rg.t.TempDir(), id)
	for i := range n {
		p := testbin.WriteTile(rg.t, dir, i, 0)
		if i >= 1024 {
			q := filepath.Join(dir, "12", strconv.Itoa(i), "7.png")
			if err := os.MkdirAll(filepath.Dir(q), 0o700); err != nil {
				rg.t.Fatal(err)
			}
			if err := os.Rename(p, q); err != nil {
				rg.t.Fatal(err)
			}
		}
	}
	rg.mustRun("tiles", "import", "--flight", id, "--state", "on_ground", dir)
	var ids []string
	rg.query(func(conn *pgx.Conn) error {
		rows, err := conn.Query(context.Background(), `SELECT tile_id FROM tiles WHERE flight_id = $1 ORDER BY tile_id`, id)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return ids
}

func (rg *reconcileRig) provExec(sql string, args ...any) {
	rg.t.Helper()
	if _, err := rg.prov.Pool.Exec(context.Background(), sql, args...); err != nil {
		rg.t.Fatal(err)
	}
}

func findings(out reconcileJSON, verdict string) []string {
	var ids []string
	for _, f := range out.Tiles {
		if f.Verdict == verdict {
			ids = append(ids, f.TileID)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestReconcileListsWhatTheProviderLacksOrHoldsWithOtherBytesAndRequeueSendsThemAgain(t *testing.T) {
	t.Parallel()
	rg := newReconcileRig(t, "RC-1", 40)

	// The provider holds the flight: exit 0, text and JSON.
	r := rg.run(time.Minute, "tiles", "reconcile", "--flight", "RC-1")
	if r.exit != 0 || !strings.Contains(r.stdout, "40 held, 0 lacking, 0 with other bytes, 0 unclear") {
		t.Fatalf("all held: exit %d, want 0\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, token) {
		t.Fatal("the token was printed")
	}

	// The provider loses three tiles (rows and files) and holds two with
	// other bytes.
	lost, other := []string{rg.ids[3], rg.ids[17], rg.ids[39]}, []string{rg.ids[0], rg.ids[25]}
	rg.provExec(`DELETE FROM provider_tiles WHERE tile_id = ANY($1)`, lost)
	rg.provExec(`UPDATE provider_tiles SET sha256 = repeat('0', 64) WHERE tile_id = ANY($1)`, other)

	r = rg.run(time.Minute, "tiles", "reconcile", "--flight", "RC-1")
	if r.exit != 3 {
		t.Fatalf("lost tiles: exit %d, want 3\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	for _, id := range lost {
		if !strings.Contains(r.stdout, id+"  lacks\n") {
			t.Errorf("text output does not list %s as lacking:\n%s", id, r.stdout)
		}
	}
	for _, id := range other {
		if !strings.Contains(r.stdout, id+"  holds_other  provider sha256 000000000000") {
			t.Errorf("text output does not list %s as held with other bytes:\n%s", id, r.stdout)
		}
	}
	out := decodeReconcile(t, rg.run(time.Minute, "tiles", "reconcile", "--flight", "RC-1", "-o", "json"))
	slices.Sort(lost)
	slices.Sort(other)
	if out.Outcome != "differs" || out.Checked != 40 || out.Held != 35 || !slices.Equal(findings(out, "lacks"), lost) ||
		!slices.Equal(findings(out, "holds_other"), other) || out.Unclear != 0 || out.Requeued != nil {
		t.Fatalf("reconcile -o json = %+v; want differs, 40 checked, 35 held, lacks %v, holds_other %v", out, lost, other)
	}

	// --requeue: back to pending, one flight-data record, and the next
	// upload sends them again.
	out = decodeReconcile(t, rg.run(time.Minute, "tiles", "reconcile", "--flight", "RC-1", "--requeue", "-o", "json"))
	if out.ExitCode != 3 || out.Requeued == nil || *out.Requeued != 5 {
		t.Fatalf("--requeue: %+v, want exit 3 and 5 requeued", out)
	}
	var pending []string
	rg.query(func(conn *pgx.Conn) error {
		rows, err := conn.Query(context.Background(), `SELECT tile_id FROM tiles WHERE flight_id = 'RC-1' AND voting_status = 'pending' ORDER BY tile_id`)
		if err != nil {
			return err
		}
		pending, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	want := slices.Concat(lost, other)
	slices.Sort(want)
	if !slices.Equal(pending, want) {
		t.Fatalf("pending after --requeue = %v, want %v", pending, want)
	}
	tail := rg.mustRun("fdr", "tail", "--kind", "upload.reconcile", "-o", "json")
	var rec struct {
		Payload struct {
			FlightID string   `json:"flight_id"`
			Requeued int      `json:"requeued"`
			TileIDs  []string `json:"tile_ids"`
			User     string   `json:"user"`
		} `json:"payload"`
	}
	line := strings.TrimSpace(tail.stdout)
	if err := json.Unmarshal([]byte(strings.SplitN(line, "\n", 2)[0]), &rec); err != nil {
		t.Fatalf("fdr tail -o json: %v\n%s", err, tail.stdout)
	}
	if rec.Payload.FlightID != "RC-1" || rec.Payload.Requeued != 5 || !slices.Equal(rec.Payload.TileIDs, want) || rec.Payload.User == "" {
		t.Fatalf("flight-data record = %+v, want flight RC-1, 5 requeued %v, a user", rec.Payload, want)
	}
	up := rg.run(time.Minute, "upload-pending", "--flight", "RC-1", "-o", "json")
	var us struct {
		Uploaded int `json:"uploaded"`
	}
	if err := json.Unmarshal([]byte(up.stdout), &us); err != nil || up.exit != 0 || us.Uploaded != 5 {
		t.Fatalf("upload after --requeue: exit %d, %+v (%v)\nstdout: %s\nstderr: %s", up.exit, us, err, up.stdout, up.stderr)
	}
	r = rg.run(time.Minute, "tiles", "reconcile", "--flight", "RC-1")
	if r.exit != 0 {
		t.Fatalf("after the resend: exit %d, want 0\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
}

func TestReconcileRetriesThroughProvider503sAndReportsNoFalseLacks(t *testing.T) {
	t.Parallel()
	rg := newReconcileRig(t, "RC-2", 60)
	// An overloaded provider (just restored from a backup, say): every
	// other one of its first 100 lookups is answered 503 (never five in a
	// row, which would open the breaker as for an outage).
	fail := func(n int64) bool { return n <= 100 && n%2 == 0 }
	rg.gate.fail503.Store(&fail)
	out := decodeReconcile(t, rg.run(2*time.Minute, "tiles", "reconcile", "--flight", "RC-2", "-o", "json"))
	if got := rg.gate.served.Load(); got < 40 {
		t.Fatalf("only %d 503s were served: the test did not strain the lookups", got)
	}
	if out.ExitCode != 0 || out.Held != 60 || out.Lacks != 0 || out.Unclear != 0 {
		t.Fatalf("through 503s: %+v, want exit 0 with 60 held and nothing lacking", out)
	}
	if out.LookupsWindowMin >= 8 {
		t.Fatalf("lookups_window_min = %d: the pace never eased off under 503s", out.LookupsWindowMin)
	}
}

func TestReconcileResumesAnInterruptedPassFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	const n = 2300
	rg := newReconcileRig(t, "RC-3", n)
	lost := rg.ids[10] // in the first page: found before the interrupt
	rg.provExec(`DELETE FROM provider_tiles WHERE tile_id = $1`, lost)
	rg.gate.holdAt.Store(1500) // the first page's lookups are answered, then the link stalls

	out, errOut := newWatchedBuffer(), newWatchedBuffer()
	cmd := rg.command("tiles", "reconcile", "--flight", "RC-3", "-o", "json")
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	checkpoint := filepath.Join(rg.dir, "cache", "reconcile", "RC-3.json")
	deadline := time.Now().Add(time.Minute)
	for rg.gate.lookups.Load() <= 1500 || !fileExists(checkpoint) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("the reconcile never reached the stall with a checkpoint (lookups %d)\n%s\n%s", rg.gate.lookups.Load(), out, errOut)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("interrupted reconcile exited %d, want 130\n%s\n%s", code, out, errOut)
	}
	var first reconcileJSON
	if err := json.Unmarshal([]byte(out.String()), &first); err != nil || first.Outcome != "interrupted" || first.Checked != 1000 {
		t.Fatalf("interrupted reconcile printed %+v (%v), want outcome interrupted after 1000\n%s\n%s", first, err, out, errOut)
	}
	rg.gate.release()
	// Lookups the interrupted process wrote before it died may still reach
	// the server (its requests sit in the sockets), and a lookup may be
	// resent: the rerun's are the distinct tiles asked about from when the
	// interrupted process's have come.
	settledCount(&rg.gate.lookups, 300*time.Millisecond)
	rg.gate.recordPaths()
	second := decodeReconcile(t, rg.run(time.Minute, "tiles", "reconcile", "--flight", "RC-3", "-o", "json"))
	asked := rg.gate.pathsSeen()
	if second.ResumedAfter == nil || second.ResumedChecked != 1000 || second.Checked != n {
		t.Fatalf("rerun: %+v, want it resumed after the first page of 1000 and checking %d in all", second, n)
	}
	if asked != n-1000 {
		t.Fatalf("the rerun asked about %d tiles, want %d (the rest after the checkpoint)", asked, n-1000)
	}
	if second.ExitCode != 3 || !slices.Equal(findings(second, "lacks"), []string{lost}) || second.Held != n-1 {
		t.Fatalf("rerun: %+v, want exit 3 listing %s (found before the interrupt) as lacking", second, lost)
	}
	if fileExists(checkpoint) {
		t.Fatal("a completed pass left its checkpoint")
	}
}

// settledCount is n once it has not moved for quiet.
func settledCount(n *atomic.Int64, quiet time.Duration) int64 {
	last := n.Load()
	for {
		time.Sleep(quiet)
		now := n.Load()
		if now == last {
			return now
		}
		last = now
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
