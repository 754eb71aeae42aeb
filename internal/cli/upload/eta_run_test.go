package upload

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/retrydecorator"
)

// In a real run at a steady --bwlimit 2M, with batches settling four at
// a time on loopback, the eta_seconds of the progress log lines follows
// the time the run really had left, from a quarter done on. The test asks
// for a third, so that a loaded machine does not fail it; the product's
// target, 20%, is measured by the link benchmarks' eta-error rows
// (internal/linkbench), on a machine that runs nothing else.
func TestTheProgressLinesETAFollowsTheRealTimeLeft(t *testing.T) {
	r := newCmdRig(t)
	r.seedSized("ETA", 300, 64<<10) // 18.75 MiB: about 9 s at 2 MiB/s
	checkETA(t, r, "2M", 16)
}

// checkETA runs the rig's flight ETA with progress lines every 250 ms and
// checks their ETA against the time the run really had left.
func checkETA(t *testing.T, r *cmdRig, bwlimit string, batch int) {
	t.Helper()
	var mu sync.Mutex
	var ticks []time.Time
	stop := make(chan struct{})
	args := []string{"--batch-size", strconv.Itoa(batch), "--concurrency", "4"}
	if bwlimit != "" {
		args = append(args, "--bwlimit", bwlimit)
	}
	res := r.run(func(o *Options) {
		o.FlightID = "ETA"
		o.Clock = retrydecorator.SystemClock{}
		o.NewTicker = func(time.Duration) (<-chan time.Time, func()) {
			c := make(chan time.Time)
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(250 * time.Millisecond):
					}
					now := time.Now()
					select {
					case c <- now: // received: the line it logs has this time
						mu.Lock()
						ticks = append(ticks, now)
						mu.Unlock()
					case <-stop:
						return
					}
				}
			}()
			return c, func() {}
		}
	}, args...)
	end := time.Now()
	close(stop)
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(res.stderr))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == "upload progress" {
			lines = append(lines, m)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != len(ticks) || len(lines) < 10 {
		t.Fatalf("%d progress lines for %d ticks, want one each and at least 10", len(lines), len(ticks))
	}
	checked, worst := 0, 0.0
	for i, m := range lines {
		done, _ := m["bytes_done"].(float64)
		total, _ := m["bytes_total"].(float64)
		if total == 0 || done*4 < total || done >= total {
			continue
		}
		eta, ok := m["eta_seconds"].(float64)
		if !ok {
			t.Fatalf("a progress line %.0f%% done has eta_seconds %v, want a number", 100*done/total, m["eta_seconds"])
		}
		real := end.Sub(ticks[i]).Seconds()
		if real < 1 {
			// In the last second the run's own end (the summary's counts)
			// is a large share: half a second is close enough there.
			if math.Abs(eta-real) > 0.5 {
				t.Errorf("%.0f%% done: ETA %.1f s, real %.1f s", 100*done/total, eta, real)
			}
			continue
		}
		if dev := eta/real - 1; math.Abs(dev) > math.Abs(worst) {
			worst = dev
		}
		checked++
	}
	t.Logf("%d progress lines from 25%% done on over %s; worst ETA off the real time left by %+.1f%%",
		checked, end.Sub(ticks[0]).Round(100*time.Millisecond), 100*worst)
	if checked < 5 || math.Abs(worst) > 1.0/3 {
		t.Fatalf("ETA off the real time left by up to %+.1f%% over %d lines, want within a third over at least 5", 100*worst, checked)
	}
}

// A batch sent again (its first answer a 503) puts its bytes on the wire
// twice; what is left to deliver is still its bytes, not less: in a real
// run at a steady --bwlimit 2M where six of the first twelve batches are
// refused once after their bodies were read, the progress lines' ETA
// follows the time the run really had left, as without resends.
func TestTheETAIsNotEarlyAfterResentBatches(t *testing.T) {
	r := newCmdRig(t)
	r.seedSized("ETA", 300, 64<<10) // 18.75 MiB: about 9 s at 2 MiB/s, and 6 MiB resent
	var posts atomic.Int32
	provider := r.srv.Config.Handler
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "tiles:batch") {
			if n := posts.Add(1); n <= 12 && n%2 == 1 {
				io.Copy(io.Discard, req.Body)
				w.Header().Set("Retry-After", "1")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"error":{"code":"UNAVAILABLE","message":"busy"}}`))
				return
			}
		}
		provider.ServeHTTP(w, req)
	}))
	t.Cleanup(front.Close)
	r.cfg.ProviderURL = front.URL
	checkETA(t, r, "2M", 16)
	if n := posts.Load(); n < 19+6 {
		t.Fatalf("%d batch requests, want the 19 batches and 6 resends", n)
	}
}
