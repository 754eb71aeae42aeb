package operation

import (
	"math/rand/v2"
	"time"
)

// JitterKind selects how Backoff spreads delays so that many clients that
// failed together do not retry together. Its values are the names the
// configuration uses (retry.jitter); "" means JitterNone.
type JitterKind string

const (
	// JitterNone uses min(base*2^(n-1), cap) as is: the default, so the
	// schedule an operator reads in the docs is the one that happens.
	JitterNone JitterKind = "none"
	// JitterFull draws uniformly from [0, d].
	JitterFull JitterKind = "full"
	// JitterEqual keeps half of d and draws the other half: [d/2, d].
	JitterEqual JitterKind = "equal"
	// JitterDecorrelated draws from [base, 3*prev], capped (the AWS
	// "decorrelated jitter"); it depends on the previous delay, not on n.
	JitterDecorrelated JitterKind = "decorrelated"
)

// Valid reports whether j is one of the kinds above or "".
func (j JitterKind) Valid() bool {
	switch j {
	case "", JitterNone, JitterFull, JitterEqual, JitterDecorrelated:
		return true
	}
	return false
}

// Backoff computes capped exponential delays. The zero Cap means no cap
// other than MaxHintDelay.
type Backoff struct {
	Base   time.Duration
	Cap    time.Duration
	Jitter JitterKind
}

func (b Backoff) limit() time.Duration {
	if b.Cap > 0 {
		return b.Cap
	}
	return MaxHintDelay
}

// Max is the largest delay Delay can return for retry n (1-based): what a
// worst-case budget must assume.
func (b Backoff) Max(n int, prev time.Duration) time.Duration {
	if b.Jitter == JitterDecorrelated {
		return min(b.limit(), max(b.Base, mul3(prev)))
	}
	return expDelay(b.Base, n, b.limit())
}

// Delay is the wait before retry n (n = 1 after the first failure):
// min(Base*2^(n-1), Cap), then jittered. prev, the previous delay, is used
// only by JitterDecorrelated. rng may be nil (the global source is used);
// tests pass a seeded one. No n overflows.
func (b Backoff) Delay(n int, rng *rand.Rand, prev time.Duration) time.Duration {
	switch b.Jitter {
	case JitterFull:
		return randBetween(rng, 0, expDelay(b.Base, n, b.limit()))
	case JitterEqual:
		d := expDelay(b.Base, n, b.limit())
		return d/2 + randBetween(rng, 0, d-d/2)
	case JitterDecorrelated:
		if b.Base <= 0 {
			return 0
		}
		hi := min(b.limit(), max(b.Base, mul3(prev)))
		return randBetween(rng, min(b.Base, hi), hi)
	}
	return expDelay(b.Base, n, b.limit())
}

func mul3(d time.Duration) time.Duration {
	if d > MaxHintDelay/3 {
		return MaxHintDelay
	}
	return 3 * d
}

// randBetween draws uniformly from [lo, hi].
func randBetween(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	span := int64(hi-lo) + 1 // hi <= MaxHintDelay, so no overflow
	if rng == nil {
		return lo + time.Duration(rand.Int64N(span))
	}
	return lo + time.Duration(rng.Int64N(span))
}

// expDelay is min(base*2^(n-1), limit) without overflow for any n.
func expDelay(base time.Duration, n int, limit time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	if n < 1 {
		n = 1
	}
	shift := n - 1
	if shift >= 63 || base > limit>>uint(shift) {
		return limit
	}
	return base << uint(shift)
}
