package linkbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/linkemu"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// rig is one flight in its own database with its blobs, and the sink that
// takes it.
type rig struct {
	flight  string
	client  *providertest.Client
	sink    *providertest.Sink
	tiles   []tilestore.Tile
	payload int64 // bytes of tile payload in the flight
	home    string
	fdr     string
}

func newRig(tb testing.TB, flight string, n, size, maxBatchTiles int) *rig {
	tb.Helper()
	r := &rig{flight: flight, client: providertest.NewClient(tb, flight), sink: providertest.StartSink(tb)}
	r.sink.SetMaxBatchTiles(maxBatchTiles)
	r.tiles = r.client.AddTiles(tb, flight, n, size, 21)
	for _, t := range r.tiles {
		r.payload += t.SizeBytes
	}
	r.home = tb.TempDir()
	r.fdr = filepath.Join(r.home, "fdr.ring")
	testbin.Tilectl(tb) // built before any clock starts
	return r
}

// reset makes every tile pending again and empties the sink.
func (r *rig) reset(tb testing.TB) {
	tb.Helper()
	if err := pgtest.ResetUploads(context.Background(), r.client.Store.Pool()); err != nil {
		tb.Fatal(err)
	}
	r.sink.Reset()
}

// checkHeld fails unless the sink holds every tile, each intact.
func (r *rig) checkHeld(tb testing.TB, who string) {
	tb.Helper()
	if held, bad := r.sink.Held(), r.sink.BadParts.Load(); held != len(r.tiles) || bad != 0 {
		tb.Fatalf("%s: the sink holds %d of %d tiles, %d bad parts", who, held, len(r.tiles), bad)
	}
}

// batches cuts the flight into batches of at most n tiles, in order.
func (r *rig) batches(n int) [][]tilestore.Tile {
	var out [][]tilestore.Tile
	for i := 0; i < len(r.tiles); i += n {
		out = append(out, r.tiles[i:min(i+n, len(r.tiles))])
	}
	return out
}

// naiveRun is one naive client's upload of the flight.
type naiveRun struct {
	whole  time.Duration // from its capabilities request to the last answer
	upload time.Duration // from its first batch to the last answer
}

// naive uploads the flight with providertest.BaselineUpload at
// concurrency conc through providerURL, in batches of the
// max_batch_tiles the provider states when asked first, as the contract
// requires of every client; upload leaves that question out, as if the
// client had been told the limit. Its transport keeps a connection per
// worker, as a careful naive client would, so it does not pay a new
// connection's handshake per batch.
func (r *rig) naive(tb testing.TB, providerURL string, conc int) naiveRun {
	tb.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conc
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	ctx := context.Background()
	start := time.Now()
	batchTiles, err := providertest.BaselineCapabilities(ctx, client, providerURL, providertest.Token)
	if err != nil {
		tb.Fatalf("naive client: %v", err)
	}
	first := time.Now()
	failed, err := providertest.BaselineUpload(ctx, client, providerURL, providertest.Token,
		r.flight, r.client.Blobs, r.batches(batchTiles), conc)
	end := time.Now()
	if len(failed) > 0 || err != nil {
		tb.Fatalf("naive client at concurrency %d: %d batches failed: %v", conc, len(failed), err)
	}
	r.checkHeld(tb, "naive client")
	return naiveRun{whole: end.Sub(start), upload: end.Sub(first)}
}

// progressLine is one "upload progress" log line, stamped when it came.
type progressLine struct {
	at         time.Time
	bytesDone  int64
	bytesTotal int64
	eta        *float64 // eta_seconds; nil when the line has none or null
}

// run is one upload-pending process that ended.
type run struct {
	elapsed  time.Duration
	cpu      time.Duration // the process's CPU time, user and system
	end      time.Time
	exit     int
	flight   map[string]any // the summary's only flight (nil if none)
	progress []progressLine
	stderr   string
}

// number is a summary field of the flight as a float (0 when absent).
func (r run) number(key string) float64 {
	v, _ := r.flight[key].(float64)
	return v
}

// tilectl runs `tilectl upload-pending` on the flight through providerURL
// with extra flags, and no other setting than where things are: what an
// operator gets at defaults. Closing stop (nil: never) sends the process
// SIGINT; after limit it is killed.
func (r *rig) tilectl(tb testing.TB, providerURL string, limit time.Duration, stop <-chan struct{}, extra ...string) run {
	tb.Helper()
	args := append([]string{"upload-pending", "--flight", r.flight, "-o", "json"}, extra...)
	cmd := exec.Command(testbin.Tilectl(tb), args...)
	cmd.Env = append(testbin.Environ("XDG_", "HOME="), "HOME="+r.home,
		"TILECTL_DATABASE_URL="+r.client.URL, "TILECTL_CACHE_DIR="+r.client.Blobs.Root(),
		"TILECTL_PROVIDER_URL="+providerURL, "TILECTL_PROVIDER_TOKEN="+providertest.Token,
		"TILECTL_FDR_PATH="+r.fdr, "TILECTL_LOG_LEVEL=info", "TILECTL_LOG_FORMAT=json")
	if p := os.Getenv("TILECTL_BENCH_CPUPROFILE"); p != "" {
		// A CPU profile of the tilectl process (the last run's, when a
		// benchmark runs it more than once), to see where its time goes.
		cmd.Env = append(cmd.Env, "TILECTL_CPUPROFILE="+p)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var res run
	var stderr strings.Builder
	var wg sync.WaitGroup
	start := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start tilectl: %v", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			stderr.WriteString(line + "\n")
			if p, ok := parseProgress(line, time.Now()); ok {
				res.progress = append(res.progress, p)
			}
		}
	}()
	done := make(chan struct{})
	go func() {
		select {
		case <-stop:
			_ = cmd.Process.Signal(syscall.SIGINT)
		case <-time.After(limit):
			_ = cmd.Process.Kill()
		case <-done:
		}
	}()
	wg.Wait() // stderr closes when the process exits
	err = cmd.Wait()
	res.end = time.Now()
	res.elapsed = res.end.Sub(start)
	close(done)
	res.stderr = stderr.String()
	if ps := cmd.ProcessState; ps != nil {
		res.cpu = ps.UserTime() + ps.SystemTime()
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.exit = ee.ExitCode()
	case err != nil:
		tb.Fatalf("tilectl: %v", err)
	}
	var sum struct {
		Flights []map[string]any `json:"flights"`
	}
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		tb.Fatalf("tilectl printed no JSON summary (%v), exit %d:\n%s\nstderr:\n%s", err, res.exit, out.String(), tail(res.stderr))
	}
	if len(sum.Flights) == 1 {
		res.flight = sum.Flights[0]
	}
	return res
}

// tail is the last lines of a long stderr, for a failure message.
func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// parseProgress reads an "upload progress" JSON log line.
func parseProgress(line string, at time.Time) (progressLine, bool) {
	if !strings.Contains(line, `"upload progress"`) {
		return progressLine{}, false
	}
	var v struct {
		BytesDone  int64    `json:"bytes_done"`
		BytesTotal *int64   `json:"bytes_total"`
		ETA        *float64 `json:"eta_seconds"`
	}
	if json.Unmarshal([]byte(line), &v) != nil || v.BytesTotal == nil {
		return progressLine{}, false
	}
	return progressLine{at: at, bytesDone: v.BytesDone, bytesTotal: *v.BytesTotal, eta: v.ETA}, true
}

// etaError is the worst |ETA - real remaining| / real remaining over the
// progress lines from 25% of the bytes done on, for a run that ended at
// end. Lines less than minRemaining before the end are left out: an ETA
// logged in tenths of a second (eta_seconds) is off by up to a twentieth
// of a second for its rounding alone, a tenth of that, and the process's
// own exit after its last batch is a larger share of less. A line
// without an ETA counts as wrong by 100%. ok is false when no line
// qualifies.
func etaError(lines []progressLine, end time.Time) (worst float64, ok bool) {
	const minRemaining = 500 * time.Millisecond
	for _, l := range lines {
		if l.bytesTotal == 0 || float64(l.bytesDone) < 0.25*float64(l.bytesTotal) {
			continue
		}
		remaining := end.Sub(l.at)
		if remaining < minRemaining {
			continue
		}
		e := 1.0
		if l.eta != nil {
			e = abs(*l.eta-remaining.Seconds()) / remaining.Seconds()
		}
		worst, ok = max(worst, e), true
	}
	return worst, ok
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// hasFlag reports whether upload-pending --help lists flag (say
// "--bwlimit"), to tell the runs that need a flag from those that can run
// without it.
func hasFlag(tb testing.TB, flag string) bool {
	tb.Helper()
	helpOnce.Do(func() {
		out, err := exec.Command(testbin.Tilectl(tb), "upload-pending", "--help").CombinedOutput()
		helpText, helpErr = string(out), err
	})
	if helpErr != nil {
		tb.Fatalf("tilectl upload-pending --help: %v\n%s", helpErr, helpText)
	}
	return strings.Contains(helpText, flag+" ")
}

var (
	helpOnce sync.Once
	helpText string
	helpErr  error
)

// newLink opens a link to the sink's server at rate (bits/s each way) and
// round trip rtt, with TCP's handshake on each new connection, and returns
// it with the provider URL that goes through it.
func newLink(tb testing.TB, target string, rate int64, rtt time.Duration) (*linkemu.Link, string) {
	tb.Helper()
	l, err := linkemu.New(linkemu.Config{UpRate: rate, DownRate: rate, Delay: rtt / 2, Handshake: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := l.Listen(u.Host)
	if err != nil {
		tb.Fatal(err)
	}
	return l, p.URL()
}
