package concurrency

import (
	"context"
	"sync"
)

// Fixed is a gate of n slots that measures nothing: the limit an operator
// set.
type Fixed struct {
	n int

	mu       sync.Mutex
	inflight int
	first    int           // AcquireFirst callers waiting
	blocked  int           // callers that found no slot and wait on changed
	changed  chan struct{} // closed and replaced when a slot frees or a first waiter leaves
}

// NewFixed returns a gate of n slots (at least 1).
func NewFixed(n int) *Fixed {
	return &Fixed{n: max(n, 1), changed: make(chan struct{})}
}

// Limit is n.
func (f *Fixed) Limit() int { return f.n }

// Ahead is n: the limit a round trip from now is the limit.
func (f *Fixed) Ahead() int { return f.n }

// Acquire waits for a slot; release gives it back. It returns ctx's error
// when ctx ends first. A slot goes to an AcquireFirst waiting before it.
func (f *Fixed) Acquire(ctx context.Context) (release func(), err error) {
	return f.acquire(ctx, false)
}

// AcquireFirst is Acquire ahead of every Acquire waiting (see
// Controller.AcquireFirst).
func (f *Fixed) AcquireFirst(ctx context.Context) (release func(), err error) {
	return f.acquire(ctx, true)
}

func (f *Fixed) acquire(ctx context.Context, first bool) (release func(), err error) {
	f.mu.Lock()
	if first {
		f.first++
		defer func() {
			f.mu.Lock()
			f.first--
			f.notify()
			f.mu.Unlock()
		}()
	}
	for {
		ahead := f.first
		if first {
			ahead = 0
		}
		if f.inflight+ahead < f.n {
			f.inflight++
			f.mu.Unlock()
			return sync.OnceFunc(f.release), nil
		}
		ch := f.changed
		f.blocked++
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			f.mu.Lock()
			f.blocked--
			f.mu.Unlock()
			return nil, ctx.Err()
		case <-ch:
		}
		f.mu.Lock()
		f.blocked--
	}
}

func (f *Fixed) release() {
	f.mu.Lock()
	f.inflight--
	f.notify()
	f.mu.Unlock()
}

// notify wakes the waiters; f.mu is held.
func (f *Fixed) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// ExpectBatchBytes does nothing: the limit is fixed, in batches.
func (f *Fixed) ExpectBatchBytes(int64) {}

// Observe does nothing: the limit is fixed.
func (f *Fixed) Observe(Sample) {}

// Overloaded does nothing: the limit is fixed.
func (f *Fixed) Overloaded() {}
