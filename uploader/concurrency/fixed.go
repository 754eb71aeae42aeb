package concurrency

import (
	"context"
	"sync"
)

// Fixed is a gate of n slots that measures nothing: the limit an operator
// set.
type Fixed struct {
	n     int
	slots chan struct{}
}

// NewFixed returns a gate of n slots (at least 1).
func NewFixed(n int) *Fixed {
	n = max(n, 1)
	return &Fixed{n: n, slots: make(chan struct{}, n)}
}

// Limit is n.
func (f *Fixed) Limit() int { return f.n }

// Ahead is n: the limit a round trip from now is the limit.
func (f *Fixed) Ahead() int { return f.n }

// Acquire waits for a slot; release gives it back.
func (f *Fixed) Acquire(ctx context.Context) (release func(), err error) {
	select {
	case f.slots <- struct{}{}:
		return sync.OnceFunc(func() { <-f.slots }), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ExpectBatchBytes does nothing: the limit is fixed, in batches.
func (f *Fixed) ExpectBatchBytes(int64) {}

// Observe does nothing: the limit is fixed.
func (f *Fixed) Observe(Sample) {}

// Overloaded does nothing: the limit is fixed.
func (f *Fixed) Overloaded() {}
