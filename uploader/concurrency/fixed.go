package concurrency

import (
	"context"
	"sync"
)

// Fixed is a gate of n slots that measures nothing: the limit an operator
// set.
type Fixed struct {
	n int

	mu sync.Mutex
	slots
}

// NewFixed returns a gate of n slots (at least 1).
func NewFixed(n int) *Fixed {
	return &Fixed{n: max(n, 1), slots: newSlots()}
}

// Limit is n.
func (f *Fixed) Limit() int { return f.n }

// Ahead is n: the limit a round trip from now is the limit.
func (f *Fixed) Ahead() int { return f.n }

// Acquire waits for a slot; release gives it back. It returns ctx's error
// when ctx ends first, or has ended already (then no slot, not even a free
// one). A slot goes to an AcquireFirst waiting before it.
func (f *Fixed) Acquire(ctx context.Context) (release func(), err error) {
	return f.acquire(ctx, false)
}

// AcquireFirst is Acquire ahead of every Acquire waiting (see
// Controller.AcquireFirst).
func (f *Fixed) AcquireFirst(ctx context.Context) (release func(), err error) {
	return f.acquire(ctx, true)
}

func (f *Fixed) acquire(ctx context.Context, first bool) (release func(), err error) {
	return f.slots.acquire(ctx, &f.mu, func() int { return f.n }, first, nil)
}

// ExpectBatchBytes does nothing: the limit is fixed, in batches.
func (f *Fixed) ExpectBatchBytes(int64) {}

// Observe does nothing: the limit is fixed.
func (f *Fixed) Observe(Sample) {}

// Overloaded does nothing: the limit is fixed.
func (f *Fixed) Overloaded() {}
