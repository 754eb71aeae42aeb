package uploader_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// inFlight wraps a provider: each batch POST waits delay before the
// provider sees it (a long link with room to spare), and the most batches
// in flight at once are counted. When throttle is set, a batch that
// throttle says no to is answered 429 instead.
type inFlight struct {
	delay    time.Duration
	throttle func() bool
	now, top atomic.Int32
	// first is how many were in flight when the first of them was
	// answered: the run's first round.
	first   atomic.Int32
	posts   atomic.Int32
	refused atomic.Int32
}

func (f *inFlight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/tiles:batch") {
			h.ServeHTTP(w, r)
			return
		}
		f.posts.Add(1)
		n := f.now.Add(1)
		defer f.now.Add(-1)
		for {
			top := f.top.Load()
			if n <= top || f.top.CompareAndSwap(top, n) {
				break
			}
		}
		time.Sleep(f.delay)
		f.first.CompareAndSwap(0, f.now.Load())
		if f.throttle != nil && f.throttle() {
			f.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"code":"RATE_LIMITED","message":"slow down"}}`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func startInFlight(t *testing.T, f *inFlight) (*providertest.Provider, string) {
	t.Helper()
	p := providertest.Start(t, nil)
	hs := httptest.NewServer(f.wrap(p.Server.Handler()))
	t.Cleanup(hs.Close)
	return p, hs.URL
}

func TestAutoConcurrencyGrowsPastItsStartOnALongLinkAndReportsItsLimit(t *testing.T) {
	t.Parallel()
	f := &inFlight{delay: 400 * time.Millisecond}
	p, url := startInFlight(t, f)
	c := providertest.NewClient(t, "fa")
	c.AddTiles(t, "fa", 300, 256, 1)
	u, _ := newUploader(t, url, c, nil)

	var mu sync.Mutex
	var limits []int
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fa", BatchSize: 2,
		Progress: func(b uploader.BatchProgress) { mu.Lock(); limits = append(limits, b.Concurrency); mu.Unlock() }})
	if err != nil || rep.Accepted != 300 {
		t.Fatalf("UploadPendingTiles: accepted %d, err %v; want 300 accepted", rep.Accepted, err)
	}
	allUploadedOnce(t, c, p, "fa", 300)
	// It starts at 32 (batches of 512 bytes: the most batches an initial
	// window in bytes starts with); a link that answers every batch in
	// 400 ms whatever is in flight has room for all of them.
	const start = 32
	if top := f.top.Load(); top <= start {
		t.Errorf("at most %d batches were in flight on a link with room for all, want more than %d", top, start)
	}
	if rep.Concurrency <= start {
		t.Errorf("report's concurrency = %d, want the grown limit (> %d)", rep.Concurrency, start)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(limits) == 0 || limits[0] < 1 || limits[len(limits)-1] <= limits[0] {
		t.Errorf("limits told with the batches %v: want them to rise", limits)
	}
}

// A provider that takes small batches (2 tiles of 16 KiB) gets the run's
// first round in bytes, not in batches: the limit starts with as many as
// its initial window holds, up to four times Initial (32 here), where
// Initial of them would carry an eighth of the window and take round
// trips to grow.
func TestAutoConcurrencyStartsWithTheInitialWindowsBytesOfSmallBatches(t *testing.T) {
	t.Parallel()
	f := &inFlight{delay: 400 * time.Millisecond}
	p, url := startInFlight(t, f)
	const tiles, size = 256, 16 << 10
	c := providertest.NewClient(t, "fw")
	c.AddTiles(t, "fw", tiles, size, 1)
	u, _ := newUploader(t, url, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fw", BatchSize: 2})
	if err != nil || rep.Accepted != tiles {
		t.Fatalf("UploadPendingTiles: accepted %d, err %v; want %d accepted", rep.Accepted, err, tiles)
	}
	allUploadedOnce(t, c, p, "fw", tiles)
	// The first round is 32; the claims of a loaded machine may not all
	// come within the first round trip, but twice Initial must.
	want := int32(2 * concurrency.DefaultInitial)
	if got := f.first.Load(); got < want {
		t.Errorf("%d batches in flight when the first was answered, want at least %d (a first round in bytes, within a half)", got, want)
	}
}

func TestAutoConcurrencyDropsWhenTheProviderThrottles(t *testing.T) {
	t.Parallel()
	// Every batch beyond 4 in flight is answered 429 with Retry-After: 1.
	f := &inFlight{delay: 50 * time.Millisecond}
	f.throttle = func() bool { return f.now.Load() > 4 }
	p, url := startInFlight(t, f)
	c := providertest.NewClient(t, "ft")
	// Batches of 256 KiB, as many as Initial fill the limit's initial
	// window in bytes: the run starts at Initial.
	c.AddTiles(t, "ft", 300, 128<<10, 1)
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) {
		o.ResendBudget = 1000
		o.Sleep = operation.Sleep // the pacer paces on the real clock
	})

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "ft", BatchSize: 2})
	if err != nil || rep.Accepted != 300 {
		t.Fatalf("UploadPendingTiles: accepted %d, err %v; want 300 accepted", rep.Accepted, err)
	}
	allUploadedOnce(t, c, p, "ft", 300)
	// It starts at 8; the throttle must bring it below that. How close to
	// the 4 the provider takes it ends depends on the pacer's timing (near
	// a throttle's level the limit grows by one every 2 s).
	if rep.Concurrency >= concurrency.DefaultInitial {
		t.Errorf("limit at the end = %d against a provider that takes 4 at once, want it below its start of %d",
			rep.Concurrency, concurrency.DefaultInitial)
	}
	if refused, posts := f.refused.Load(), f.posts.Load(); refused*4 > posts {
		t.Errorf("%d of %d batch sends answered 429, want at most a quarter: a storm", refused, posts)
	}
}

func TestAClientIDKeepsOneBatchInFlightWhateverConcurrencyIsAsked(t *testing.T) {
	t.Parallel()
	_, rec, url := strictProvider(t, nil)
	c := providertest.NewClient(t, "fs")
	c.AddTiles(t, "fs", 40, 256, 1)
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) { o.ClientID = "ground-1" })
	for i, conc := range []int{0, 8} {
		rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fs", BatchSize: 2, Concurrency: conc})
		if err != nil {
			t.Fatalf("concurrency %d: %v", conc, err)
		}
		if rep.Batches > 0 && rep.Concurrency != 1 {
			t.Errorf("concurrency %d asked: report's limit %d, want 1", conc, rep.Concurrency)
		}
		if i == 0 {
			c.AddTilesFrom(t, "fs", 40, 40, 256, 2)
		}
	}
	if n := rec.mostInFlight(); n != 1 {
		t.Errorf("most batches in flight = %d, want 1", n)
	}
}
