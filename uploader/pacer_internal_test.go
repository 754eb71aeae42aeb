package uploader

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/uploader/concurrency"
)

// fakeClock is a clock whose sleeps move it on at once and are recorded.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d)
	return ctx.Err()
}

func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func (c *fakeClock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sleeps
	c.sleeps = nil
	return s
}

var (
	okAnswer  = verdict{kind: done, status: 200, signal: concurrency.Answered, hasSignal: true}
	throttle1 = verdict{kind: throttled, status: 429, wait: time.Second, floor: time.Second, signal: concurrency.Overloaded, hasSignal: true}
)

// tookTwentyASecond feeds p answers 50 ms apart for a second and a half,
// so the last second before the clock's time holds 20 of them.
func tookTwentyASecond(c *fakeClock, p *pacer) {
	for range 30 {
		c.advance(50 * time.Millisecond)
		p.answered(okAnswer, c.now())
	}
	c.advance(25 * time.Millisecond)
}

func TestAPacerThatWasNeverThrottledLetsEveryRequestGoAtOnce(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	p := newPacer(c.now, c.sleep)
	for range 100 {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		p.answered(okAnswer, c.now())
	}
	if s := c.slept(); len(s) != 0 || p.current() != 0 {
		t.Fatalf("slept %v, interval %v; want no waits", s, p.current())
	}
}

func TestAThrottleSpacesRequestStartsAtJustUnderTheRateTheProviderTook(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	p := newPacer(c.now, c.sleep)
	// The provider took 20 answers over the last second, then refused.
	tookTwentyASecond(c, p)
	if cut, _ := p.answered(throttle1, c.now()); !cut {
		t.Fatal("the first throttle did not raise the interval")
	}
	rate := 20.0
	want := time.Duration(float64(time.Second) / (paceMargin * rate))
	if got := p.current(); got != want {
		t.Fatalf("interval %v after 20 answers a second, want %v (0.9 of the rate)", got, want)
	}
	// Four requests ready at once start an interval apart.
	for range 4 {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	s := c.slept()
	if len(s) != 3 {
		t.Fatalf("slept %v, want 3 waits of %v (the first goes at once)", s, want)
	}
	for _, d := range s {
		if d != want {
			t.Fatalf("slept %v, want each %v", s, want)
		}
	}
}

func TestRefusalsOfRequestsSentAtTheOldPaceRaiseTheIntervalOnce(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	p := newPacer(c.now, c.sleep)
	for range 10 {
		c.advance(100 * time.Millisecond)
		p.answered(okAnswer, c.now())
	}
	before := c.now().Add(-time.Millisecond) // sent before the raise
	p.answered(throttle1, c.now())
	iv := p.current()
	c.advance(10 * time.Millisecond)
	for range 5 {
		if cut, _ := p.answered(throttle1, before); cut {
			t.Fatal("a refusal of a request sent before the raise cut the limit on batches in flight")
		}
	}
	if p.current() != iv {
		t.Fatalf("interval %v, want %v: old refusals say nothing new", p.current(), iv)
	}
	// A request sent at the new pace and refused again: too short still.
	if p.answered(throttle1, c.now()); p.current() <= iv {
		t.Fatalf("interval %v after a refusal at the new pace, want more than %v", p.current(), iv)
	}
}

func TestNoRequestIsHeldLongerThanTheProviderAdvised(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	p := newPacer(c.now, c.sleep)
	// Nothing got through in the last window: no rate to go by; refusals
	// at each new pace lengthen the interval, never past the advice.
	for range 20 {
		p.answered(throttle1, c.now())
		c.advance(time.Millisecond)
	}
	if got := p.current(); got != time.Second {
		t.Fatalf("interval %v after a run of refusals advising 1 s, want 1s (the advice)", got)
	}
	short := throttle1
	short.floor, short.wait = 200*time.Millisecond, 200*time.Millisecond
	p.answered(short, c.now().Add(2*time.Second))
	c.advance(2 * time.Second)
	p.answered(short, c.now())
	if got := p.current(); got > 200*time.Millisecond {
		t.Fatalf("interval %v after a refusal advising 200ms, want at most that", got)
	}
}

func TestAnswersEaseThePaceSlowlyNearTheRateLastAllowedAndThenToNone(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	p := newPacer(c.now, c.sleep)
	tookTwentyASecond(c, p)
	p.answered(throttle1, c.now())
	start := p.current()
	// Two seconds of answers at the pace: near the rate last allowed.
	for range 2 * 18 {
		c.advance(start)
		p.answered(okAnswer, c.now())
	}
	near := p.current()
	if near >= start || near < start*9/10 {
		t.Fatalf("interval %v after 2 s of answers from %v, want it eased by a few percent", near, start)
	}
	// Long after the last throttle the pacing goes.
	for range 3000 {
		c.advance(20 * time.Millisecond)
		p.answered(okAnswer, c.now())
		if p.current() == 0 {
			break
		}
	}
	if p.current() != 0 {
		t.Fatalf("interval %v a minute after the last throttle, want 0 (no pacing)", p.current())
	}
	// No answer at all (a broken connection) says nothing about the rate.
	p.answered(throttle1, c.now())
	iv := p.current()
	c.advance(time.Second)
	p.answered(verdict{kind: unclear, breakerFailure: true}, c.now())
	if p.current() != iv {
		t.Fatalf("interval %v after a request with no answer, want %v", p.current(), iv)
	}
}

func TestAPacedWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	p := newPacer(time.Now, func(ctx context.Context, d time.Duration) error { <-ctx.Done(); return ctx.Err() })
	p.answered(throttle1, time.Now())
	_ = p.wait(context.Background()) // the first goes at once
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.wait(ctx); err == nil {
		t.Fatal("a paced wait on an ended context returned nil")
	}
}

func TestTheLimitOnBatchesInFlightIsCutOnlyWhenTheProvidersRateIsNewOrLower(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	p := newPacer(c.now, c.sleep)
	tookTwentyASecond(c, p)
	if cut, _ := p.answered(throttle1, c.now()); !cut {
		t.Fatal("the first throttle did not cut the limit: the provider's rate was not known")
	}
	// At about the same rate: the pacer's probe went over; no cut.
	for range 20 {
		c.advance(50 * time.Millisecond)
		p.answered(okAnswer, c.now())
	}
	c.advance(time.Millisecond)
	if cut, _ := p.answered(throttle1, c.now()); cut {
		t.Fatal("a throttle at the rate the provider took before cut the limit")
	}
	// The provider now takes half as many: news for the limit.
	for range 10 {
		c.advance(100 * time.Millisecond)
		p.answered(okAnswer, c.now())
	}
	c.advance(time.Millisecond)
	if cut, _ := p.answered(throttle1, c.now()); !cut {
		t.Fatal("a throttle at half the rate the provider took before did not cut the limit")
	}
}

func TestRefusalsThatComeAtAnyPaceDoNotSlowTheRunToACrawl(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	p := newPacer(c.now, c.sleep)
	// A provider that refuses every third request with advice whatever
	// the pace (injected faults, not a limit on rate); a client that would
	// send one request every 10 ms.
	sent := 0
	end := t0.Add(60 * time.Second)
	for c.now().Before(end) {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		started := c.now()
		c.advance(10 * time.Millisecond)
		sent++
		if sent%3 == 0 {
			p.answered(throttle1, started)
		} else {
			p.answered(okAnswer, started)
		}
	}
	if sent < 6000/2 {
		t.Fatalf("%d requests in 60 s where 6000 would go unpaced: the pacer follows faults down", sent)
	}
	// A throttle without advice is not a rate to keep to.
	q := newPacer(c.now, c.sleep)
	for range 10 {
		c.advance(10 * time.Millisecond)
		q.answered(verdict{kind: throttled, status: 503, wait: time.Second, signal: concurrency.Overloaded, hasSignal: true}, c.now())
	}
	if q.current() != 0 {
		t.Fatalf("interval %v after 503s without advice, want 0", q.current())
	}
}

// A throttle with a wait is paced from then on; one without (a fault to
// back off from, not a rate), even while an earlier one's pacing holds,
// is not: the limit on batches in flight keeps under the rate alone.
func TestAThrottleIsPacedOnlyWhenItGaveAWait(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	p := newPacer(c.now, c.sleep)
	tookTwentyASecond(c, p)
	if _, paced := p.answered(throttle1, c.now()); !paced {
		t.Fatal("a throttle with Retry-After: not paced")
	}
	noWait := throttle1
	noWait.wait, noWait.floor = 0, 0
	c.advance(time.Second)
	if cut, paced := p.answered(noWait, c.now()); !cut || paced {
		t.Fatalf("a throttle without a wait while pacing holds: cut %v, paced %v; want a cut, not paced", cut, paced)
	}
}

// bucketProvider allows rate requests a second after a burst (a token
// bucket, full at the start; the rate may change at changeAt to rate2) and
// refuses beyond it with Retry-After: 1. It decides each request half a
// round trip after it starts and answers it a round trip after.
type bucketProvider struct {
	rate, burst float64
	changeAt    time.Duration // 0: never
	rate2       float64
}

// bucketRun is what a client paced by a pacer got from a bucketProvider:
// the times, from the run's start, of the requests the provider took and
// of those it refused.
type bucketRun struct {
	took, refused []time.Duration
}

// in counts the times in ts within [from, to).
func in(ts []time.Duration, from, to time.Duration) int {
	n := 0
	for _, t := range ts {
		if t >= from && t < to {
			n++
		}
	}
	return n
}

// runAgainst drives a pacer with a fake clock for d: a client that keeps
// up to 16 requests in flight (starting at most one every 2 ms), 150 ms
// round trips, and resends a refused request after the advised second.
func runAgainst(bp bucketProvider, d time.Duration) bucketRun {
	const inFlight, rtt, gap = 16, 150 * time.Millisecond, 2 * time.Millisecond
	type event struct {
		at, started time.Time
		answer, ok  bool // answer: the answer comes; else the provider decides
		resend      bool // a refused request is ready again
	}
	now := t0
	var events []event // kept in time order
	push := func(e event) {
		i := len(events)
		for i > 0 && events[i-1].at.After(e.at) {
			i--
		}
		events = append(events[:i], append([]event{e}, events[i:]...)...)
	}
	var run bucketRun
	p := &pacer{}
	tokens, last := bp.burst, t0
	flying, ready := 0, 0
	process := func(e event) {
		now = e.at
		switch {
		case e.resend:
			ready++
		case !e.answer:
			rate := bp.rate
			if bp.changeAt > 0 && now.Sub(t0) >= bp.changeAt {
				rate = bp.rate2
			}
			tokens = min(bp.burst, tokens+now.Sub(last).Seconds()*rate)
			last = now
			ok := tokens >= 1
			if ok {
				tokens--
				run.took = append(run.took, now.Sub(t0))
			} else {
				run.refused = append(run.refused, now.Sub(t0))
			}
			push(event{at: now.Add(rtt / 2), started: e.started, answer: true, ok: ok})
		default:
			flying--
			if e.ok {
				p.answered(okAnswer, e.started)
			} else {
				p.answered(throttle1, e.started)
				push(event{at: now.Add(time.Second), resend: true})
			}
		}
	}
	until := func(t time.Time) {
		for len(events) > 0 && !events[0].at.After(t) {
			e := events[0]
			events = events[1:]
			process(e)
		}
		now = t
	}
	p.now = func() time.Time { return now }
	p.sleep = func(_ context.Context, d time.Duration) error { until(now.Add(d)); return nil }
	end := t0.Add(d)
	for now.Before(end) {
		if flying < inFlight {
			if ready > 0 {
				ready--
			}
			_ = p.wait(context.Background())
			flying++
			push(event{at: now.Add(rtt / 2), started: now})
			until(now.Add(gap))
			continue
		}
		until(events[0].at)
	}
	return run
}

// A provider that allows a rate after a burst takes more than the rate in
// its first second. The pace a throttle sets keeps to the rate it
// sustains (counted from a refusal on, when its allowance is spent), and
// grows no further while the throttle is recent: after the first seconds,
// at most one more refusal in the next 15 s (a pace that eases past the
// rate comes to one every few seconds), and the rate taken all the same.
func TestAThrottledPaceKeepsToTheRateTheProviderSustainsNotItsBurst(t *testing.T) {
	t.Parallel()
	for _, bp := range []bucketProvider{{rate: 20, burst: 5}, {rate: 20, burst: 40}, {rate: 100, burst: 10}, {rate: 5, burst: 2}} {
		run := runAgainst(bp, 20*time.Second)
		from, to := 5*time.Second, 20*time.Second
		if n := in(run.refused, from, to); n > 1 {
			t.Errorf("%v/s after a burst of %v: %d refused between %v and %v, want at most 1 (refused at %v)",
				bp.rate, bp.burst, n, from, to, run.refused)
		}
		if got := float64(in(run.took, from, to)) / (to - from).Seconds(); got < 0.9*bp.rate {
			t.Errorf("%v/s after a burst of %v: took %.1f/s between %v and %v, want at least 0.9 of the rate",
				bp.rate, bp.burst, got, from, to)
		}
	}
}

// A provider whose limit rises after the pace has kept to it is met at
// the new rate once the throttle is long past.
func TestAPaceKeptToAProvidersRateFollowsTheRateWhenItRises(t *testing.T) {
	t.Parallel()
	run := runAgainst(bucketProvider{rate: 20, burst: 5, changeAt: 20 * time.Second, rate2: 40}, 60*time.Second)
	from, to := 40*time.Second, 60*time.Second
	if got := float64(in(run.took, from, to)) / (to - from).Seconds(); got < 0.9*40 {
		t.Errorf("took %.1f/s in the 20 s after the limit rose from 20/s to 40/s (from %v), want at least 36", got, from)
	}
}
