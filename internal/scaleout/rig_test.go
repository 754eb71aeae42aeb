// Package scaleout_test checks, with real processes, a real Postgres (and
// PgBouncer in transaction pooling mode) and a provider over real HTTP,
// that upload-pending processes share a flight: batch claims, leases,
// adoption of a killed run's batches, exactly-once storage and counting.
package scaleout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

const token = "scale-out-token-never-printed-4b1d"

func TestMain(m *testing.M) { testbin.Main(m) }

// rig is one flight in its own database, its blobs, and a provider.
type rig struct {
	t       testing.TB
	store   *tilestore.Store
	dbURL   string // what the processes connect to (direct, or through PgBouncer)
	cache   string
	fdr     string
	prov    *providertest.Recorder
	provURL string
	flight  string
	ids     []string
}

func newRig(t testing.TB, flight string, n int, latency time.Duration, reject func(string) bool) *rig {
	t.Helper()
	pool, dbURL := pgtest.New(t)
	dir := t.TempDir()
	blobs, err := tilestore.NewBlobStore(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, store: tilestore.NewStore(pool), dbURL: dbURL, cache: blobs.Root(),
		fdr: filepath.Join(dir, "fdr.ring"), flight: flight}
	r.prov = providertest.StartRecorder(t, providertest.RecorderConfig{Token: token, Latency: latency, Reject: reject})
	r.provURL = r.prov.URL
	ctx := context.Background()
	if _, err := r.store.UpsertFlight(ctx, flight, tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	tiles := make([]tilestore.Tile, n)
	for i := range tiles {
		id := fmt.Sprintf("%s-t%05d", flight, i)
		rel := fmt.Sprintf("%s/20/%d/%d.png", flight, i/1000, i%1000)
		size, sum, err := blobs.Put(rel, strings.NewReader("tile bytes of "+id))
		if err != nil {
			t.Fatal(err)
		}
		tiles[i] = tilestore.Tile{ID: id, FlightID: flight, Z: 20, X: int64(i / 1000), Y: int64(i % 1000),
			ContentType: "image/png", SizeBytes: size, SHA256: sum, BlobPath: rel,
			CapturedAt: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)}
		r.ids = append(r.ids, id)
	}
	if _, err := r.store.InsertTiles(ctx, tiles); err != nil {
		t.Fatal(err)
	}
	return r
}

// proc is one running `tilectl upload-pending`.
type proc struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	errb bytes.Buffer
	done chan struct{}
	exit int
}

// start launches upload-pending on the rig's flight with extra flags.
func (r *rig) start(extra ...string) *proc {
	r.t.Helper()
	args := append([]string{"upload-pending", "--flight", r.flight, "-o", "json", "--deadline", "2m",
		"--backoff-base", "100ms", "--backoff-cap", "500ms"}, extra...)
	p := &proc{cmd: exec.Command(testbin.Tilectl(r.t), args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "TILECTL_DATABASE_URL="+r.dbURL, "TILECTL_CACHE_DIR="+r.cache,
		"TILECTL_PROVIDER_URL="+r.provURL, "TILECTL_PROVIDER_TOKEN="+token, "TILECTL_FDR_PATH="+r.fdr,
		"TILECTL_LOG_LEVEL=warn", "TILECTL_LOG_FORMAT=json")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errb
	if err := p.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.exit = 0
		if ee, ok := err.(*exec.ExitError); ok {
			p.exit = ee.ExitCode()
		} else if err != nil {
			p.exit = -2
		}
		close(p.done)
	}()
	r.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process and returns its exit code and summary.
func (p *proc) wait(t testing.TB) (int, map[string]any) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("upload-pending did not end; stderr:\n%s", p.errb.String())
	}
	var sum map[string]any
	if p.exit >= 0 && p.out.Len() > 0 {
		if err := json.Unmarshal(p.out.Bytes(), &sum); err != nil {
			t.Fatalf("summary is not JSON (%v):\n%s\nstderr:\n%s", err, p.out.String(), p.errb.String())
		}
	}
	return p.exit, sum
}

func (p *proc) kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		<-p.done
		t.Fatalf("kill: %v (it exited %d before; stdout:\n%s\nstderr:\n%s)", err, p.exit, p.out.String(), p.errb.String())
	}
	<-p.done
}

// flightOf is the summary's only flight.
func flightOf(t testing.TB, sum map[string]any) map[string]any {
	t.Helper()
	fs, _ := sum["flights"].([]any)
	if len(fs) != 1 {
		t.Fatalf("summary has %d flights: %v", len(fs), sum)
	}
	return fs[0].(map[string]any)
}

// counts is the flight's tiles per status.
func (r *rig) counts() map[string]int {
	r.t.Helper()
	rows, err := r.store.Pool().Query(context.Background(),
		`SELECT voting_status, count(*)::int FROM tiles WHERE flight_id = $1 GROUP BY 1`, r.flight)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			r.t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

// holds reports whether the process pid holds an open batch of the flight.
func (r *rig) holds(t *testing.T, pid int) bool {
	t.Helper()
	ls, err := r.store.Leases(context.Background(), r.flight)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.PID == pid && l.Tiles > 0 {
			return true
		}
	}
	return false
}
