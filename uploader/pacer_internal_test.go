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
