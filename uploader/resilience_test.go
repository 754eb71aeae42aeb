package uploader_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
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
// A provider that is down is not hammered: from the breaker's opening to
// its closing, the only batch requests that go are its probes, and those
// the workers had been let through before it opened (a batch in flight, a
// resend of a failure answered before then: one per worker at most). How
// many fail before the fifth in a row opens it depends on when the
// workers' answers are heard, so the test counts no requests; it checks
// each one against the breaker's states, in the order they happened (a
// timeline).
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
	tl := newTimeline()
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Now, o.Sleep = time.Now, nil
		o.Store, o.WrapTransport, o.Breaker = tl.claims(c.Store), tl.sends, uploader.BreakerOptions{OnChange: tl.breakerChanged}
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
	tl.mu.Lock()
	defer tl.mu.Unlock()
	t.Logf("requests reaching the provider during the 20 s outage: %d; breaker: %s", o.during(), tl.states())
	for _, s := range tl.batchSends {
		if s.after == 0 {
			t.Fatalf("batch %s went at %d, and the timeline saw neither its claim nor an earlier request of it: it cannot tell when the breaker let it go", s.opID, s.start)
		}
	}
	for _, h := range tl.holds() {
		early, probes, err := h.check(tl.batchSends)
		t.Logf("held from %d to %d: %d batch requests caused before it began (in flight, or probes) and %d probes caused after went meanwhile",
			h.open, h.close, early, probes)
		if err != nil {
			t.Error(err)
		}
	}
	if ev := tl.events; len(ev) == 0 || ev[0].State != uploader.BreakerOpen || ev[len(ev)-1].State != uploader.BreakerClosed {
		t.Fatalf("breaker states %s: want it to open, then close", tl.states())
	}
	if rep.Outcome != uploader.OutcomeSuccess || rep.Pending != 0 || rep.Uploaded() != 240 {
		t.Fatalf("report %+v: want all 240 tiles uploaded once the provider recovered", rep)
	}
	allUploadedOnce(t, c, p, "fo", 240)
}

// timeline stamps what a test sees of a run with one counter under one
// lock, so a stamp taken after another happened after it, whichever
// goroutines took them: the breaker's state changes (taken inside the
// breaker's own lock, as it changes), the start of each batch claim, and
// the start and end of each batch request on the client's side.
type timeline struct {
	mu         sync.Mutex
	n          int
	events     []uploader.BreakerEvent
	eventAt    []int
	claimedAt  map[string]int // op ID -> its claim's start
	endedAt    map[string]int // op ID -> the end of its last request
	batchSends []batchSend
}

// batchSend is one batch request: the breaker let it go after its cause
// (the claim of its batch, or the end of its previous request: a worker
// asks the breaker after that) and before it started. after is 0 when the
// test saw no cause.
type batchSend struct {
	opID         string
	after, start int
}

func newTimeline() *timeline {
	return &timeline{claimedAt: map[string]int{}, endedAt: map[string]int{}}
}

func (tl *timeline) stamp() int { tl.n++; return tl.n }

func (tl *timeline) breakerChanged(e uploader.BreakerEvent) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events, tl.eventAt = append(tl.events, e), append(tl.eventAt, tl.stamp())
}

// claims wraps s so the start of every batch claim is stamped.
func (tl *timeline) claims(s *tilestore.Store) uploader.Store { return &claimStamps{Store: s, tl: tl} }

type claimStamps struct {
	*tilestore.Store
	tl *timeline
}

func (s *claimStamps) ClaimBatch(ctx context.Context, c tilestore.Claim) (tilestore.Claimed, error) {
	s.tl.mu.Lock()
	at := s.tl.stamp()
	s.tl.mu.Unlock()
	cl, err := s.Store.ClaimBatch(ctx, c)
	if err == nil && cl.Batch.OpID != "" {
		s.tl.mu.Lock()
		s.tl.claimedAt[cl.Batch.OpID] = at
		s.tl.mu.Unlock()
	}
	return cl, err
}

// sends wraps the client's transport so every batch request (one with an
// Idempotency-Key) is stamped as it starts and as it ends.
func (tl *timeline) sends(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		opID := r.Header.Get(operation.HeaderIdempotencyKey)
		if opID == "" {
			return next.RoundTrip(r)
		}
		tl.mu.Lock()
		after := max(tl.claimedAt[opID], tl.endedAt[opID])
		tl.batchSends = append(tl.batchSends, batchSend{opID: opID, after: after, start: tl.stamp()})
		tl.mu.Unlock()
		resp, err := next.RoundTrip(r)
		tl.mu.Lock()
		tl.endedAt[opID] = tl.stamp()
		tl.mu.Unlock()
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// hold is a span of the timeline from a breaker's opening (from closed)
// to its closing (0: it never closed), with its half-open states: the
// only moments it lets a request go, one probe each.
type hold struct {
	open, close int
	halfOpen    []int
}

// holds reads the breaker's holds off the timeline; tl.mu is held.
func (tl *timeline) holds() []hold {
	var hs []hold
	for i, e := range tl.events {
		at := tl.eventAt[i]
		switch {
		case e.State == uploader.BreakerOpen && (len(hs) == 0 || hs[len(hs)-1].close != 0):
			hs = append(hs, hold{open: at})
		case e.State == uploader.BreakerHalfOpen:
			hs[len(hs)-1].halfOpen = append(hs[len(hs)-1].halfOpen, at)
		case e.State == uploader.BreakerClosed:
			hs[len(hs)-1].close = at
		}
	}
	return hs
}

// check fails unless every batch request that started within the hold,
// caused after it began (so let go after it began), is one of its probes:
// each is matched to a half-open state of its own between its cause and
// its start. early counts the others that started within it: caused
// before it began, each was let go before (at most one per worker) or is a
// probe.
func (h hold) check(sends []batchSend) (early, probes int, err error) {
	used := make([]bool, len(h.halfOpen))
	for _, s := range sends { // in the order they started
		if s.start < h.open || (h.close != 0 && s.start > h.close) {
			continue
		}
		if s.after < h.open {
			early++
			continue
		}
		probe := -1 // the first half-open state free for it: the sends come in the order they started
		for i, at := range h.halfOpen {
			if !used[i] && at > s.after && at < s.start {
				probe = i
				break
			}
		}
		if probe < 0 {
			return early, probes, fmt.Errorf("batch %s went at %d, while the breaker held requests back from %d to %d, caused at %d, after it began, and no probe of its own was let go in between (half-open at %v)",
				s.opID, s.start, h.open, h.close, s.after, h.halfOpen)
		}
		used[probe] = true
		probes++
	}
	return early, probes, nil
}

// states lists the breaker's states with their stamps; tl.mu is held.
func (tl *timeline) states() string {
	var b strings.Builder
	for i, e := range tl.events {
		fmt.Fprintf(&b, "%s@%d ", e.State, tl.eventAt[i])
	}
	return strings.TrimSpace(b.String())
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
