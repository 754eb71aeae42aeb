package providertest

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// Throttle is a provider front that admits at most PerSecond batch POSTs a
// second (a token bucket of Burst tokens, full at the start) and answers
// the others 429 RATE_LIMITED with Retry-After: 1, as a provider that
// protects itself by rate does. Other requests pass. It counts the batch
// POSTs, what it refused and admitted, and when the first and the last
// admitted batch came.
type Throttle struct {
	inner            http.Handler
	perSecond, burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
	stats  ThrottleStats
}

// ThrottleStats is what a Throttle let through and refused.
type ThrottleStats struct {
	Posts, Refused, Admitted int
	First, End               time.Time // the first and the last admission
}

// NewThrottle puts a Throttle in front of inner.
func NewThrottle(inner http.Handler, perSecond, burst float64) *Throttle {
	return &Throttle{inner: inner, perSecond: perSecond, burst: burst, tokens: burst}
}

func (t *Throttle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/tiles:batch") {
		t.inner.ServeHTTP(w, r)
		return
	}
	if !t.take(time.Now()) {
		w.Header().Set("Retry-After", "1")
		operation.WriteError(w, http.StatusTooManyRequests, operation.CodeRateLimited,
			fmt.Sprintf("at most %g batches a second", t.perSecond), nil, nil)
		return
	}
	t.inner.ServeHTTP(w, r)
}

// take counts a batch POST at now and spends a token on it if there is one.
func (t *Throttle) take(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.Posts++
	if !t.last.IsZero() {
		t.tokens = min(t.burst, t.tokens+now.Sub(t.last).Seconds()*t.perSecond)
	}
	t.last = now
	if t.tokens < 1 {
		t.stats.Refused++
		return false
	}
	t.tokens--
	if t.stats.First.IsZero() {
		t.stats.First = now
	}
	t.stats.End = now
	t.stats.Admitted++
	return true
}

// Stats returns the counts so far.
func (t *Throttle) Stats() ThrottleStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Reset fills the bucket and clears the counts, for the next run.
func (t *Throttle) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tokens, t.last, t.stats = t.burst, time.Time{}, ThrottleStats{}
}
