package uploader

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// stepClock is a fake clock whose Sleep moves time forward at once.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(max(d, 0))
	c.mu.Unlock()
	return ctx.Err()
}

func TestBreakerOpensAfterThresholdProbesOnceAndDoublesItsCooldown(t *testing.T) {
	t.Parallel()
	clk := &stepClock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	var events []BreakerEvent
	b := newBreaker(BreakerOptions{FailureThreshold: 3, Cooldown: time.Second, MaxCooldown: 3 * time.Second,
		OnChange: func(e BreakerEvent) { events = append(events, e) }}, clk.Now, clk.Sleep)
	ctx := context.Background()
	start := clk.Now()
	for i := range 3 {
		a, err := b.acquire(ctx)
		if err != nil || a.probe {
			t.Fatalf("closed breaker, request %d: %+v err=%v", i, a, err)
		}
		b.record(a, false)
	}
	if len(events) != 1 || events[0].State != BreakerOpen || !events[0].Since.Equal(start) ||
		!events[0].RetryAt.Equal(start.Add(time.Second)) || events[0].Openings != 1 {
		t.Fatalf("events after 3 failures = %+v, want one open event since %s", events, start)
	}
	// The next request waits out the cool-down and is the probe.
	probe, err := b.acquire(ctx)
	if err != nil || !probe.probe || clk.Now().Sub(start) != time.Second {
		t.Fatalf("after cool-down: %+v err=%v waited %s, want the probe after 1s", probe, err, clk.Now().Sub(start))
	}
	// A failed probe reopens with twice the cool-down, then the cap.
	b.record(probe, false)
	if probe, _ = b.acquire(ctx); !probe.probe || clk.Now().Sub(start) != 3*time.Second {
		t.Fatalf("second probe at %s, want 3s (1s + 2s)", clk.Now().Sub(start))
	}
	b.record(probe, false)
	if probe, _ = b.acquire(ctx); !probe.probe || clk.Now().Sub(start) != 6*time.Second {
		t.Fatalf("third probe at %s, want 6s (cool-down capped at 3s)", clk.Now().Sub(start))
	}
	b.record(probe, true)
	if a, err := b.acquire(ctx); a.probe || err != nil {
		t.Fatalf("after a good probe the breaker must be closed: %+v err=%v", a, err)
	}
	last := events[len(events)-1]
	if last.State != BreakerClosed || b.openingsSoFar() != 1 {
		t.Fatalf("last event %+v, openings %d; want closed after one opening", last, b.openingsSoFar())
	}
}

func TestBreakerLetsOneProbeThroughWhileOthersWait(t *testing.T) {
	t.Parallel()
	clk := &stepClock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	b := newBreaker(BreakerOptions{FailureThreshold: 1, Cooldown: time.Second}, clk.Now, clk.Sleep)
	first, _ := b.acquire(context.Background())
	b.record(first, false)
	probe, err := b.acquire(context.Background())
	if !probe.probe || err != nil {
		t.Fatalf("first waiter: %+v err=%v", probe, err)
	}
	got := make(chan bool, 4)
	for range 4 {
		go func() {
			a, _ := b.acquire(context.Background())
			got <- a.probe
		}()
	}
	select {
	case <-got:
		t.Fatal("a second request went while the probe was out")
	case <-time.After(50 * time.Millisecond):
	}
	b.record(probe, true)
	for range 4 {
		if p := <-got; p {
			t.Fatal("a request after the breaker closed was called a probe")
		}
	}
}

func TestBreakerGivesUpAtTheOutageLimit(t *testing.T) {
	t.Parallel()
	clk := &stepClock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	b := newBreaker(BreakerOptions{FailureThreshold: 1, Cooldown: time.Second, OutageLimit: 10 * time.Second}, clk.Now, clk.Sleep)
	start := clk.Now()
	first, _ := b.acquire(context.Background())
	b.record(first, false)
	for {
		probe, err := b.acquire(context.Background())
		var pu *ProviderUnavailableError
		if errors.As(err, &pu) {
			if !pu.Since.Equal(start) || clk.Now().Sub(start) != 10*time.Second {
				t.Fatalf("gave up %s after the outage began (since %s), want at 10s", clk.Now().Sub(start), pu.Since)
			}
			return
		}
		if err != nil || !probe.probe {
			t.Fatalf("%+v err=%v", probe, err)
		}
		b.record(probe, false)
	}
}

func TestBreakerOffWithNegativeThreshold(t *testing.T) {
	t.Parallel()
	b := newBreaker(BreakerOptions{FailureThreshold: -1}, time.Now, operation.Sleep)
	for range 100 {
		a, _ := b.acquire(context.Background())
		b.record(a, false)
	}
	if a, err := b.acquire(context.Background()); a.probe || err != nil {
		t.Fatalf("disabled breaker: %+v err=%v", a, err)
	}
}

// A request admitted before the breaker opened may still be answered
// after it did (it was on the wire, or its answer was slow). Its success
// says nothing about the provider now: the breaker stays open and waits
// for its probe, or every worker would go back to hammering an outage.
func TestBreakerIgnoresTheLateAnswersOfRequestsAdmittedBeforeItOpened(t *testing.T) {
	t.Parallel()
	clk := &stepClock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	var events []BreakerEvent
	b := newBreaker(BreakerOptions{FailureThreshold: 3, Cooldown: time.Second,
		OnChange: func(e BreakerEvent) { events = append(events, e) }}, clk.Now, clk.Sleep)
	ctx := context.Background()
	var early []admission
	for range 5 {
		a, err := b.acquire(ctx)
		if err != nil || a.probe {
			t.Fatalf("closed breaker: %+v %v", a, err)
		}
		early = append(early, a)
	}
	for _, a := range early[:3] {
		b.record(a, false)
	}
	b.record(early[3], true)  // in flight before the opening, answered after it
	b.record(early[4], false) // likewise: no second opening, no longer cool-down
	if len(events) != 1 || events[0].State != BreakerOpen || events[0].Openings != 1 {
		t.Fatalf("events %+v: want the breaker opened once and still open", events)
	}
	start := clk.Now()
	probe, err := b.acquire(ctx)
	if err != nil || !probe.probe || clk.Now().Sub(start) != time.Second {
		t.Fatalf("next request: %+v %v after %s, want the probe after the 1s cool-down", probe, err, clk.Now().Sub(start))
	}
	b.record(early[0], true) // a stale answer during the probe closes nothing either
	if b.lastEvent.State != BreakerHalfOpen {
		t.Fatalf("state %s after a stale success during the probe, want half_open", b.lastEvent.State)
	}
	b.record(probe, true)
	if last := events[len(events)-1]; last.State != BreakerClosed {
		t.Fatalf("last event %+v, want closed after the probe's success", last)
	}
}
