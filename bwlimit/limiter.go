package bwlimit

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Clock is the limiter's time. Sleep must return ctx.Err() as soon as ctx
// is done.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// Chunk bounds: a Take grants at most a twentieth of a second of the rate,
// within these, so a waiter never sleeps long past a change of the limit
// and the bucket's burst (one chunk) is a small share of any 10 s window.
const (
	minChunk = 512
	maxChunk = 32 << 10
)

// Limiter is one token bucket on the bytes of request bodies, shared by
// every batch of a process: each Take queues for its share in the order the
// takers came, so concurrent bodies get the limit in equal parts. The rate
// follows the timetable, read from the clock at each Take, and Toggle turns
// the limit off and on again (SIGUSR2). It is safe for concurrent use.
type Limiter struct {
	tt    Timetable
	clock Clock
	// OnSwitch, if set before the first Take, is told the timetable's new
	// rate when the rate in force switches at one of its times (seen at
	// the first Take after it), not when Toggle changes it. It must not
	// block.
	OnSwitch func(Rate)

	mu       sync.Mutex
	disabled bool          // toggled off
	rate     Rate          // the bucket's rate; Off: no bucket
	bucket   *rate.Limiter // nil when Off
	waiters  map[*struct{}]context.CancelFunc
	table    Rate // the timetable's rate at the last Take
	seen     bool // table is set
}

// New returns a limiter for tt on clock.
func New(tt Timetable, clock Clock) *Limiter {
	return &Limiter{tt: tt, clock: clock, waiters: map[*struct{}]context.CancelFunc{}}
}

// Configured reports whether a limit was set at all (a timetable that ever
// limits): SIGUSR2 toggles only such a limit.
func (l *Limiter) Configured() bool { return l != nil && l.tt.Limited() }

// Timetable is the limit as configured.
func (l *Limiter) Timetable() Timetable { return l.tt }

// Current is the limit in force now: Off when toggled off or when the
// timetable says off.
func (l *Limiter) Current() Rate {
	if l == nil {
		return Off
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.disabled {
		return Off
	}
	return l.tt.At(l.clock.Now())
}

// Toggle turns the limit off, or back on; it reports whether the limit is
// on afterwards. Waiters wake and queue again under the new limit.
func (l *Limiter) Toggle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.disabled = !l.disabled
	l.wakeLocked()
	return !l.disabled
}

// wakeLocked ends every waiter's sleep, so each takes again under the
// limit now in force.
func (l *Limiter) wakeLocked() {
	for k, cancel := range l.waiters {
		cancel()
		delete(l.waiters, k)
	}
}

// bucketLocked is the bucket for the limit in force at now, made anew when
// the limit changed (a timetable's switch); nil when there is none.
func (l *Limiter) bucketLocked(now time.Time) *rate.Limiter {
	r := Off
	if !l.disabled {
		r = l.tt.At(now)
	}
	if r != l.rate || (r > Off && l.bucket == nil) {
		l.rate, l.bucket = r, nil
		if r > Off {
			l.bucket = rate.NewLimiter(rate.Limit(r), chunkFor(r))
			// A new bucket starts empty: a switch is no burst.
			l.bucket.ReserveN(now, chunkFor(r))
		}
		l.wakeLocked()
	}
	return l.bucket
}

// noteSwitch tells OnSwitch when the timetable's rate in force has
// changed since the last Take.
func (l *Limiter) noteSwitch() {
	l.mu.Lock()
	r := l.tt.At(l.clock.Now())
	switched := l.seen && r != l.table
	l.table, l.seen = r, true
	hook := l.OnSwitch
	l.mu.Unlock()
	if switched && hook != nil {
		hook(r)
	}
}

func chunkFor(r Rate) int {
	return int(min(max(int64(r)/20, minChunk), maxChunk))
}

// Take waits until up to want bytes may be written and returns how many
// (at least 1 when want is, at most want): the caller writes that many and
// takes again for the rest. It returns ctx's error as soon as ctx is done.
func (l *Limiter) Take(ctx context.Context, want int) (int, error) {
	if want <= 0 {
		return 0, ctx.Err()
	}
	l.noteSwitch()
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		l.mu.Lock()
		now := l.clock.Now()
		b := l.bucketLocked(now)
		if b == nil {
			l.mu.Unlock()
			return want, nil
		}
		n := min(want, b.Burst())
		res := b.ReserveN(now, n)
		delay := res.DelayFrom(now)
		if delay <= 0 {
			l.mu.Unlock()
			return n, nil
		}
		wctx, cancel := context.WithCancel(ctx)
		key := &struct{}{}
		l.waiters[key] = cancel
		l.mu.Unlock()

		err := l.clock.Sleep(wctx, delay)

		l.mu.Lock()
		_, waiting := l.waiters[key]
		delete(l.waiters, key)
		l.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			return n, nil
		case ctx.Err() != nil:
			res.CancelAt(l.clock.Now())
			return 0, ctx.Err()
		case !waiting:
			// Woken by a change of the limit: take again under it.
			res.CancelAt(l.clock.Now())
		default:
			return 0, err
		}
	}
}
