package uploader_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// fakeClock's Sleep moves time forward at once, so a 20 s outage and the
// breaker's cool-downs pass without the test waiting for them.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(max(d, 0))
	c.mu.Unlock()
	return ctx.Err()
}

// outage is a provider front that answers 503 UNAVAILABLE to everything
// for a span of time, starting when the after-th batch request
// arrives, and counts the requests that reach it meanwhile.
type outage struct {
	inner   http.Handler
	now     func() time.Time
	after   int64
	span    time.Duration
	batches atomic.Int64

	mu          sync.Mutex
	start       time.Time
	duringCount int
}

func (o *outage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && o.batches.Add(1) == o.after {
		o.mu.Lock()
		o.start = o.now()
		o.mu.Unlock()
	}
	o.mu.Lock()
	down := !o.start.IsZero() && o.now().Before(o.start.Add(o.span))
	if down {
		o.duringCount++
	}
	o.mu.Unlock()
	if !down {
		o.inner.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"errors":[{"code":"UNAVAILABLE","message":"down for maintenance"}]}`))
}

func (o *outage) during() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.duringCount
}

// TestBreakerKeepsAnOutageFromBeingHammeredAndTheRunResumes is the
// issue's outage: the provider answers 503 to everything for 20 s from its
// 40th batch request, while 16 workers upload 240 tiles in batches of 2,
// with the breaker's defaults (5 failures in a row open it; cool-down 5 s,
// doubling, capped at 60 s).
//
// It runs on the real clock (about 35 s, most of it waiting): a fake clock
// that jumps on every Sleep would add up the waits of 16 workers waiting
// side by side and end the outage early, which hides the hammering this
// test is about.
func TestBreakerKeepsAnOutageFromBeingHammeredAndTheRunResumes(t *testing.T) {
	t.Parallel()
	const span = 20 * time.Second
	p := providertest.Start(t, nil)
	o := &outage{inner: p.Server.Handler(), now: time.Now, after: 40, span: span}
	hs := httptest.NewServer(o)
	t.Cleanup(hs.Close)
	c := providertest.NewClient(t, "fo")
	c.AddTiles(t, "fo", 240, 512, 3)
	var mu sync.Mutex
	var events []uploader.BreakerEvent
	breaker := uploader.BreakerOptions{OnChange: func(e uploader.BreakerEvent) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Now, o.Sleep, o.Breaker = time.Now, nil, breaker
		// The breaker is under test, not the retry budget: every batch in
		// flight when the outage starts is resent once it ends, and on a
		// loaded machine a few more fail before the breaker opens. The
		// default budget (10 + 0.2 per first attempt) sits right at that
		// count; TestResendsStopWhenTheBudgetIsSpentAndTheNextRunSettlesWithTheSameKeys
		// covers what happens when it is spent.
		o.ResendBudget = 64
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fo", BatchSize: 2, Concurrency: 16})
	if err != nil {
		t.Fatalf("UploadPendingTiles through a 20 s outage: %v (report %+v)", err, rep)
	}
	mu.Lock()
	defer mu.Unlock()
	during := o.during()
	t.Logf("requests reaching the provider during the 20 s outage: %d (16 batches in flight); breaker events: %d", during, len(events))
	// The 16 batches in flight when it went down; the resends of the
	// workers whose attempt failed before the fifth failure in a row
	// opened the breaker (up to 4 on a loaded machine, where the failures
	// of the 16 do not arrive at once); then the probes 5 s and 15 s after
	// it opened (the next, 35 s after, finds the provider back).
	if during > 16+4+2 {
		t.Errorf("%d requests reached the provider during the outage, want at most 16 in flight + 4 resends before the breaker opened + 2 probes", during)
	}
	if rep.Outcome != uploader.OutcomeSuccess || rep.Pending != 0 || rep.Uploaded() != 240 {
		t.Fatalf("report %+v: want all 240 tiles uploaded once the provider recovered", rep)
	}
	if len(events) == 0 || events[0].State != uploader.BreakerOpen || events[len(events)-1].State != uploader.BreakerClosed {
		t.Fatalf("breaker events %+v: want it to open, then close", events)
	}
	allUploadedOnce(t, c, p, "fo", 240)
}

// dropAnswers runs the provider, then loses its answer: the batch is
// stored and sealed, and the client sees the connection close.
type dropAnswers struct {
	inner http.Handler
	on    atomic.Bool
}

func (d *dropAnswers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !d.on.Load() || r.Method != http.MethodPost {
		d.inner.ServeHTTP(w, r)
		return
	}
	d.inner.ServeHTTP(httptest.NewRecorder(), r)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// behindDroppedAnswers serves p through a dropAnswers, on, and returns
// both.
func behindDroppedAnswers(t *testing.T, p *providertest.Provider) (*dropAnswers, *httptest.Server) {
	t.Helper()
	d := &dropAnswers{inner: p.Server.Handler()}
	d.on.Store(true)
	hs := httptest.NewServer(d)
	t.Cleanup(hs.Close)
	return d, hs
}

func TestResendsStopWhenTheBudgetIsSpentAndTheNextRunSettlesWithTheSameKeys(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	d := &dropAnswers{inner: p.Server.Handler()}
	d.on.Store(true)
	var mu sync.Mutex
	keys := map[string]int{} // Idempotency-Key -> requests
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			mu.Lock()
			keys[k]++
			mu.Unlock()
		}
		d.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	c := providertest.NewClient(t, "fd")
	c.AddTiles(t, "fd", 20, 512, 4)
	clk := newFakeClock()
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Now, o.Sleep = clk.Now, clk.Sleep
		// No reused connections: net/http never replays a request on its
		// own, so every request here is one the uploader chose to make.
		o.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		o.ResendBudget, o.ResendRatio = 4, 0.5 // 10 batches: 4 + 10 x 0.5 = 9 resends at most
		o.MaxResends = 8                       // more than the budget: the budget, not a batch's own limit, stops the resends
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd", BatchSize: 2, Concurrency: 1})
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	mu.Lock()
	sent, firstKeys := 0, map[string]bool{}
	for k, n := range keys {
		sent += n
		firstKeys[k] = true
	}
	mu.Unlock()
	if len(firstKeys) != 10 || sent != 10+9 || rep.Resends != 9 {
		t.Fatalf("first run sent %d requests under %d keys, report resends %d; want 10 batches + 9 budgeted resends",
			sent, len(firstKeys), rep.Resends)
	}
	open, err := c.Store.OpenBatches(testCtx(t), "fd")
	if err != nil || len(open) != 10 || rep.Pending != 20 {
		t.Fatalf("open batches %d (%v), pending %d: want all 10 batches open, all 20 tiles pending", len(open), err, rep.Pending)
	}

	d.on.Store(false)
	rep, err = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd", BatchSize: 2, Concurrency: 1})
	if err != nil || rep.Pending != 0 || rep.Replayed != 10 {
		t.Fatalf("second run: %+v, %v; want the 10 batches replayed and nothing pending", rep, err)
	}
	mu.Lock()
	for k := range keys {
		if !firstKeys[k] {
			t.Errorf("the second run sent a new key %s", k)
		}
	}
	mu.Unlock()
	for _, tl := range p.Ledger(t).Tiles {
		if tl.Writes != 1 || !strings.HasPrefix(tl.TileID, "fd-") {
			t.Errorf("tile %s written %d times", tl.TileID, tl.Writes)
		}
	}
}
