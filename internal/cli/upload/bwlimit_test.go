package upload

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/linkemu"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/tilestore"
)

// arrivals counts the request body bytes a server receives, as they
// arrive, with the time of each read.
type arrivals struct {
	mu    sync.Mutex
	times []time.Time
	total []int64 // cumulative bytes at times[i]
}

func (a *arrivals) add(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var prev int64
	if k := len(a.total); k > 0 {
		prev = a.total[k-1]
	}
	a.times = append(a.times, time.Now())
	a.total = append(a.total, prev+int64(n))
}

// at is the bytes received by t.
func (a *arrivals) at(t time.Time) int64 {
	var n int64
	for i, ti := range a.times {
		if ti.After(t) {
			break
		}
		n = a.total[i]
	}
	return n
}

type countingBody struct {
	io.ReadCloser
	a *arrivals
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if n > 0 {
		c.a.add(n)
	}
	return n, err
}

// seedSized is seed with tiles of size bytes each.
func (r *cmdRig) seedSized(flight string, n, size int) {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.store.UpsertFlight(ctx, flight, tilestore.FlightOnGround); err != nil {
		r.t.Fatal(err)
	}
	tiles := make([]tilestore.Tile, n)
	for i := range tiles {
		id := fmt.Sprintf("%s-t%04d", flight, i)
		rel := fmt.Sprintf("%s/18/%d/7.png", flight, i)
		body := bytes.Repeat([]byte{byte(i)}, size)
		sz, sum, err := r.blobs.Put(rel, bytes.NewReader(body))
		if err != nil {
			r.t.Fatal(err)
		}
		tiles[i] = tilestore.Tile{ID: id, FlightID: flight, Z: 18, X: int64(i), Y: 7, ContentType: "image/png",
			SizeBytes: sz, SHA256: sum, BlobPath: rel, CapturedAt: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)}
	}
	if _, err := r.store.InsertTiles(ctx, tiles); err != nil {
		r.t.Fatal(err)
	}
}

// A run with --bwlimit 2M, four batches in flight, sends 2 MiB/s within 5%
// over every 10 s window, measured where the provider's side receives the
// bodies: on loopback, and through an emulated cellular link (30 Mbit/s,
// 50 ms round trip, one shared bottleneck) whose capacity is well above
// the limit.
func TestBWLimit2MIsHonouredWithin5PercentOverEvery10sWindow(t *testing.T) {
	for _, tc := range []struct {
		name string
		link *linkemu.Config
	}{
		{"loopback", nil},
		{"cellular", &linkemu.Config{UpRate: 30e6, DownRate: 30e6, Delay: 25 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCmdRig(t)
			const limit = 2 << 20
			r.seedSized("BW", 440, 64<<10) // 27.5 MiB: about 14 s at the limit
			var got arrivals
			target, _ := url.Parse(r.prov.URL)
			proxy := httputil.NewSingleHostReverseProxy(target)
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.Method == http.MethodPost {
					req.Body = countingBody{req.Body, &got}
				}
				proxy.ServeHTTP(w, req)
			}))
			defer front.Close()
			r.cfg.ProviderURL = front.URL
			if tc.link != nil {
				link, err := linkemu.New(*tc.link)
				if err != nil {
					t.Fatal(err)
				}
				defer link.Close()
				lp, err := link.Listen(front.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				r.cfg.ProviderURL = lp.URL()
			}
			res := r.run(func(o *Options) {
				o.FlightID = "BW"
				o.Clock = retrydecorator.SystemClock{}
			}, "--bwlimit", "2M", "--batch-size", "16", "--concurrency", "4")
			if res.code != exitcode.OK {
				t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
			}
			first, last := got.times[0], got.times[len(got.times)-1]
			if span := last.Sub(first); span < 11*time.Second {
				t.Fatalf("the bodies took %s, too short to measure 10 s windows: the limit was not kept", span)
			}
			worst := 0.0
			for s := first; !s.Add(10 * time.Second).After(last); s = s.Add(100 * time.Millisecond) {
				rate := float64(got.at(s.Add(10*time.Second))-got.at(s)) / 10
				if dev := rate/limit - 1; math.Abs(dev) > math.Abs(worst) {
					worst = dev
				}
			}
			t.Logf("%s: bodies over %s; worst 10 s window off the limit by %+.2f%%", tc.name, last.Sub(first).Round(time.Millisecond), 100*worst)
			if math.Abs(worst) > 0.05 {
				t.Fatalf("a 10 s window was off the 2 MiB/s limit by %+.1f%%, want within 5%%", 100*worst)
			}
		})
	}
}
