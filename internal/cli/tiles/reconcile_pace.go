package tiles

import (
	"context"
	"sync"
)

// Reconcile's lookups in flight: from reconcileStartLookups, additive
// increase up to reconcileMaxLookups while answers come without resends,
// halved (not below 1) when one takes resends (429, 503, a timeout).
const (
	reconcileStartLookups = 8
	reconcileMaxLookups   = 64
)

// pacer bounds how many lookups are in flight and learns from how they
// were answered. acquire blocks until one more may start (or ctx ends) and
// returns a ticket for release, which says whether the answer came
// strained.
type pacer interface {
	acquire(ctx context.Context) (ticket uint64, err error)
	release(ticket uint64, strained bool)
	inFlight() (n, limit int)
}

// aimd is the pacer: TCP's additive increase, multiplicative decrease over
// a window of lookups. A window grows by one per window's worth of
// unstrained answers; a strained answer halves it once per "generation":
// the answers of lookups that started before the cut tell of the load
// the cut already answered, so they cut nothing more.
type aimd struct {
	mu       sync.Mutex
	window   float64
	max      float64
	n        int
	gen      uint64        // incremented by every cut
	wake     chan struct{} // closed when room may have opened
	lowWater float64       // smallest window seen, for the summary
}

var _ pacer = (*aimd)(nil)

func newAIMD(start, max int) *aimd {
	return &aimd{window: float64(start), max: float64(max), wake: make(chan struct{}), lowWater: float64(start)}
}

func (a *aimd) acquire(ctx context.Context) (uint64, error) {
	for {
		a.mu.Lock()
		if a.n < int(a.window) {
			a.n++
			g := a.gen
			a.mu.Unlock()
			return g, nil
		}
		w := a.wake
		a.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (a *aimd) release(ticket uint64, strained bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n--
	switch {
	case strained && ticket == a.gen:
		a.window = max(a.window/2, 1)
		a.lowWater = min(a.lowWater, a.window)
		a.gen++
	case !strained:
		a.window = min(a.window+1/a.window, a.max)
	}
	close(a.wake)
	a.wake = make(chan struct{})
}

func (a *aimd) inFlight() (int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n, int(a.window)
}
