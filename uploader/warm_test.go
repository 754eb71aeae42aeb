package uploader_test

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/linkemu"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// arrivals wraps a provider and notes when its capabilities answer was
// written and when each batch request came.
type arrivals struct {
	mu      sync.Mutex
	caps    time.Time
	batches []time.Time
}

func (a *arrivals) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tiles:batch") {
			a.mu.Lock()
			a.batches = append(a.batches, time.Now())
			a.mu.Unlock()
		}
		h.ServeHTTP(w, r)
		if r.URL.Path == "/v1/capabilities" {
			a.mu.Lock()
			a.caps = time.Now()
			a.mu.Unlock()
		}
	})
}

// On a long link every new connection pays a handshake round trip before
// its first byte. The connections of a run's first batches are opened
// while the provider is asked its limits, so the batches the limit
// starts with all reach the provider one round trip after it answered
// (the answer's way back, the batches' way there), not two.
func TestTheFirstBatchesGoOnConnectionsOpenedDuringTheCapabilitiesRequest(t *testing.T) {
	const rtt = 400 * time.Millisecond
	p := providertest.Start(t, func(c *provider.Config) { c.Limits.MaxBatchTiles = 2 })
	var a arrivals
	hs := httptest.NewServer(a.wrap(p.Server.Handler()))
	t.Cleanup(hs.Close)
	l, err := linkemu.New(linkemu.Config{UpRate: 100e6, DownRate: 100e6, Delay: rtt / 2, Handshake: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	px, err := l.Listen(strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	const flight, first = "warm", concurrency.DefaultInitial
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, 2*first, 1<<10, 1)
	u, _ := newUploader(t, px.URL(), c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: flight})
	if err != nil || rep.Accepted != 2*first {
		t.Fatalf("accepted %d of %d: %v", rep.Accepted, 2*first, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.batches) < first || a.caps.IsZero() {
		t.Fatalf("the provider saw %d batches and capabilities answered at %v", len(a.batches), a.caps)
	}
	sort.Slice(a.batches, func(i, j int) bool { return a.batches[i].Before(a.batches[j]) })
	// A round trip, and half of one for the run's own work (a claim, the
	// blobs read) and a loaded machine: a batch on a connection opened
	// after the answer comes a whole round trip later still.
	bound := rtt + rtt/2
	for i, at := range a.batches[:first] {
		if d := at.Sub(a.caps); d > bound {
			t.Errorf("batch %d of the first %d reached the provider %v after it answered the capabilities request, want within %v",
				i+1, first, d.Round(time.Millisecond), bound)
		}
	}
}
