package linkemu

import (
	"sync"
	"sync/atomic"
	"time"
)

// serializer is one direction of the bottleneck: the queue every
// connection's chunks wait in, and the wire that sends them one after the
// other at the rate in force when each reaches the head of the queue. A
// goroutine (run) plays the wire; it keeps to a virtual schedule, so a
// late wake-up is caught up at once instead of costing throughput.
type serializer struct {
	delay      time.Duration
	fixedQueue int // Config.QueueBytes; 0: the queue follows the rate

	mu        sync.Mutex
	rate      int64 // bits per second; 0: no limit
	limit     int   // bytes the queue holds at most
	queued    int   // bytes waiting, including the one on the wire
	fifo      []*chunk
	room      chan struct{} // closed (and replaced) when bytes leave
	nonEmpty  chan struct{} // a token when the fifo gains a chunk
	busyUntil time.Time     // when the last chunk sent left

	sent atomic.Int64
}

func newSerializer(rate int64, delay time.Duration, queue int) *serializer {
	s := &serializer{delay: delay, fixedQueue: queue, room: make(chan struct{}), nonEmpty: make(chan struct{}, 1)}
	s.setRate(rate)
	return s
}

func (s *serializer) setRate(rate int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rate = rate
	s.limit = s.fixedQueue
	if s.limit == 0 {
		s.limit = defaultQueue(rate, s.delay)
	}
	s.wake()
}

// wake lets readers waiting for room look again. Callers hold mu.
func (s *serializer) wake() {
	close(s.room)
	s.room = make(chan struct{})
}

// defaultQueue is twice the bandwidth-delay product, at least MinQueueBytes.
func defaultQueue(rate int64, delay time.Duration) int {
	bdp := float64(rate) / 8 * (2 * delay).Seconds()
	return max(MinQueueBytes, int(2*bdp))
}

// enqueue waits until the queue has room for c and puts it at the tail. It
// reports false when done closes first. A chunk larger than the whole
// queue is let into an empty queue, so nothing waits forever.
func (s *serializer) enqueue(c *chunk, done <-chan struct{}) bool {
	for {
		s.mu.Lock()
		if s.queued == 0 || s.queued+c.n <= s.limit {
			c.queued = time.Now()
			s.queued += c.n
			s.fifo = append(s.fifo, c)
			s.mu.Unlock()
			select {
			case s.nonEmpty <- struct{}{}:
			default:
			}
			return true
		}
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-done:
			return false
		}
	}
}

// run is the wire: it sends the queue's chunks in order, each leaving when
// the one before has left and its own bytes have been clocked out at the
// rate, and hands each to its connection to arrive delay later.
func (s *serializer) run(done <-chan struct{}) {
	var t timer
	for {
		s.mu.Lock()
		if len(s.fifo) == 0 {
			s.mu.Unlock()
			select {
			case <-s.nonEmpty:
				continue
			case <-done:
				return
			}
		}
		c := s.fifo[0]
		s.fifo[0] = nil
		s.fifo = s.fifo[1:]
		rate := s.rate
		s.mu.Unlock()

		// The wire starts on c when the chunk before has left, or when c
		// came, if the wire was idle then.
		start := s.busyUntil
		if c.queued.After(start) {
			start = c.queued
		}
		if rate > 0 {
			s.busyUntil = start.Add(time.Duration(float64(c.n) * 8 / float64(rate) * float64(time.Second)))
		} else {
			s.busyUntil = start
		}
		if !t.sleepUntil(s.busyUntil, done) {
			return
		}
		c.at = s.busyUntil.Add(s.delay)
		s.sent.Add(int64(c.n))
		s.mu.Lock()
		s.queued -= c.n
		s.wake()
		s.mu.Unlock()
		c.out <- c // never blocks: a connection has at most inFlight chunks out
	}
}

// timer is one goroutine's reusable timer.
type timer struct{ t *time.Timer }

// sleepUntil waits until at, or reports false if done closes first. A wait
// shorter than the timer's own granularity is not waited.
func (t *timer) sleepUntil(at time.Time, done <-chan struct{}) bool {
	d := time.Until(at)
	if d <= 20*time.Microsecond {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	if t.t == nil {
		t.t = time.NewTimer(d)
	} else {
		t.t.Reset(d)
	}
	select {
	case <-t.t.C:
		return true
	case <-done:
		t.t.Stop()
		return false
	}
}
