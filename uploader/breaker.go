package uploader

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// BreakerState is the circuit breaker's state.
type BreakerState string

const (
	// BreakerClosed: requests go through.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: no request goes until the cool-down ends.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: one probe is on the wire; everyone else waits for
	// its result.
	BreakerHalfOpen BreakerState = "half_open"
)

// BreakerOptions tune the circuit breaker shared by a run's workers. Zero
// fields take the stated defaults.
type BreakerOptions struct {
	// FailureThreshold is how many failures in a row (no answer, or a 5xx)
	// open the breaker. Default 5; negative turns the breaker off.
	FailureThreshold int
	// Cooldown is the first wait before a probe. Default 5s.
	Cooldown time.Duration
	// MaxCooldown caps the cool-down, which doubles each time a probe
	// fails. Default 60s.
	MaxCooldown time.Duration
	// OutageLimit ends the requests waiting on the breaker with a
	// *ProviderUnavailableError once the provider has been unavailable this
	// long. Default 0: only the run's deadline ends the wait.
	OutageLimit time.Duration
	// OnChange is told about every state change. It must not block.
	OnChange func(BreakerEvent)
}

// BreakerEvent is one breaker state change, for progress displays (which
// render "provider unavailable since T"; the uploader prints nothing).
type BreakerEvent struct {
	State BreakerState
	// Since is when the provider became unavailable (the first failure of
	// the run that opened the breaker); zero when State is closed.
	Since time.Time
	// RetryAt is when the next probe may go (State open).
	RetryAt time.Time
	// Openings counts closed->open transitions in this uploader's life.
	Openings int
}

// ProviderUnavailableError: the breaker stayed open past the outage limit.
type ProviderUnavailableError struct {
	Since time.Time
	Limit time.Duration
}

func (e *ProviderUnavailableError) Error() string {
	return fmt.Sprintf("provider unavailable since %s, longer than the outage limit of %s (open batches stay journaled and are resent by the next run; raise upload.outage_limit to wait longer)",
		e.Since.UTC().Format(time.RFC3339), e.Limit)
}

const (
	defaultBreakerThreshold   = 5
	defaultBreakerCooldown    = 5 * time.Second
	defaultBreakerMaxCooldown = 60 * time.Second
)

// breaker is a consecutive-failure circuit breaker with one half-open probe
// and a doubling cool-down. It reads time only through now and waits only
// through sleep, so tests drive it with a fake clock.
type breaker struct {
	opts  BreakerOptions
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu        sync.Mutex
	state     BreakerState
	failures  int
	since     time.Time // first failure of the current run of failures
	retryAt   time.Time
	cooldown  time.Duration
	probing   bool
	openings  int
	gen       uint64        // advanced on every state change
	changed   chan struct{} // closed and replaced on every state change
	lastEvent BreakerEvent
}

func newBreaker(o BreakerOptions, now func() time.Time, sleep func(context.Context, time.Duration) error) *breaker {
	if o.FailureThreshold == 0 {
		o.FailureThreshold = defaultBreakerThreshold
	}
	if o.Cooldown <= 0 {
		o.Cooldown = defaultBreakerCooldown
	}
	if o.MaxCooldown <= 0 {
		o.MaxCooldown = defaultBreakerMaxCooldown
	}
	o.MaxCooldown = max(o.MaxCooldown, o.Cooldown)
	return &breaker{opts: o, now: now, sleep: sleep, state: BreakerClosed, cooldown: o.Cooldown,
		changed: make(chan struct{})}
}

// admission is a request's leave to go: whether it is the half-open
// probe, and the breaker generation (state) it was let through in.
type admission struct {
	probe bool
	gen   uint64
}

// acquire waits until a request may go. A probe's result must be reported
// (record or abandon).
func (b *breaker) acquire(ctx context.Context) (admission, error) {
	if b.opts.FailureThreshold < 0 {
		return admission{}, nil
	}
	for {
		b.mu.Lock()
		now := b.now()
		switch {
		case b.state == BreakerClosed:
			a := admission{gen: b.gen}
			b.mu.Unlock()
			return a, nil
		case b.opts.OutageLimit > 0 && now.Sub(b.since) >= b.opts.OutageLimit:
			since := b.since
			b.mu.Unlock()
			return admission{}, &ProviderUnavailableError{Since: since, Limit: b.opts.OutageLimit}
		case b.state == BreakerOpen && !now.Before(b.retryAt):
			b.setLocked(BreakerHalfOpen)
			b.probing = true
			a := admission{probe: true, gen: b.gen}
			b.mu.Unlock()
			return a, nil
		}
		// Open and cooling down, or half-open with the probe out: wait for
		// the cool-down's end (or the outage limit), or a state change.
		wait := time.Duration(-1)
		if b.state == BreakerOpen {
			wait = b.retryAt.Sub(now)
			if b.opts.OutageLimit > 0 {
				wait = min(wait, b.since.Add(b.opts.OutageLimit).Sub(now))
			}
		}
		changed := b.changed
		b.mu.Unlock()
		if err := b.wait(ctx, changed, wait); err != nil {
			return admission{}, err
		}
	}
}

// wait returns when changed is closed, d has passed (d >= 0), or ctx ends.
func (b *breaker) wait(ctx context.Context, changed <-chan struct{}, d time.Duration) error {
	if d < 0 {
		select {
		case <-changed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-wctx.Done():
		}
	}()
	_ = b.sleep(wctx, d)
	return ctx.Err()
}

// record reports the result of the attempt a let through: ok is false for
// no answer or a 5xx.
func (b *breaker) record(a admission, ok bool) {
	if b.opts.FailureThreshold < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.gen != b.gen {
		// Let through before the last state change: an answer from before
		// the breaker opened (or closed) says nothing about the provider
		// now. Only the probe's answer may close an open breaker.
		return
	}
	probe := a.probe
	if probe {
		b.probing = false
	}
	if ok {
		b.failures = 0
		b.cooldown = b.opts.Cooldown
		if b.state != BreakerClosed {
			b.setLocked(BreakerClosed)
		}
		return
	}
	if b.failures == 0 && b.state == BreakerClosed {
		b.since = b.now()
	}
	b.failures++
	switch {
	case probe && b.state == BreakerHalfOpen:
		b.cooldown = min(2*b.cooldown, b.opts.MaxCooldown)
		b.retryAt = b.now().Add(b.cooldown)
		b.setLocked(BreakerOpen)
	case b.state == BreakerClosed && b.failures >= b.opts.FailureThreshold:
		b.openings++
		b.retryAt = b.now().Add(b.cooldown)
		b.setLocked(BreakerOpen)
	}
}

// abandon gives the probe slot back when the probe ended without a result
// (cancelled, or the journal failed before it was sent).
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probing && b.state == BreakerHalfOpen {
		b.probing = false
		b.setLocked(BreakerOpen) // retryAt is past: the next waiter probes
	}
}

func (b *breaker) setLocked(s BreakerState) {
	b.state = s
	b.gen++
	close(b.changed)
	b.changed = make(chan struct{})
	ev := BreakerEvent{State: s, Openings: b.openings}
	if s != BreakerClosed {
		ev.Since = b.since
	}
	if s == BreakerOpen {
		ev.RetryAt = b.retryAt
	}
	if b.opts.OnChange != nil && ev != b.lastEvent {
		b.opts.OnChange(ev)
	}
	b.lastEvent = ev
}

// openingsSoFar is how many times the breaker opened.
func (b *breaker) openingsSoFar() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openings
}
