package concurrency

import (
	"context"
	"sync"
)

// slots are a gate's batches in flight and the callers waiting for one,
// guarded by the gate's mutex: Fixed and Controller differ only in the
// limit.
type slots struct {
	inflight int
	first    int           // AcquireFirst callers waiting
	blocked  int           // callers that found no slot and wait on changed
	changed  chan struct{} // closed and replaced when a slot frees, a first waiter leaves or the limit moves
}

func newSlots() slots { return slots{changed: make(chan struct{})} }

// acquire waits, mu unlocked, until a slot under limit() (read with mu
// held) is free and takes it; a caller not first leaves as many slots as
// there are first callers waiting. took runs with mu held as the slot is
// taken (nil: nothing). It returns ctx's error when ctx ends first, or
// has ended as a slot frees: a caller whose context has ended gets no
// slot, which it would only give back, even a free one (a slot that frees
// as ctx ends wakes it as ctx does, and which wake it sees is chance).
func (s *slots) acquire(ctx context.Context, mu *sync.Mutex, limit func() int, first bool, took func()) (release func(), err error) {
	mu.Lock()
	if first {
		s.first++
		defer func() {
			mu.Lock()
			s.first--
			s.notify() // an Acquire it held back may go now
			mu.Unlock()
		}()
	}
	for {
		if err := ctx.Err(); err != nil {
			mu.Unlock()
			return nil, err
		}
		ahead := s.first
		if first {
			ahead = 0
		}
		if s.inflight+ahead < limit() {
			s.inflight++
			if took != nil {
				took()
			}
			mu.Unlock()
			return sync.OnceFunc(func() {
				mu.Lock()
				s.inflight--
				s.notify()
				mu.Unlock()
			}), nil
		}
		ch := s.changed
		s.blocked++
		mu.Unlock()
		select {
		case <-ctx.Done():
			mu.Lock()
			s.blocked--
			mu.Unlock()
			return nil, ctx.Err()
		case <-ch:
		}
		mu.Lock()
		s.blocked--
	}
}

// notify wakes the waiters; the gate's mutex is held.
func (s *slots) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}
