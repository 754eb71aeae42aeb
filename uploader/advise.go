package uploader

import (
	"net/http"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// advise completes v, an error answer's verdict, from the answer's advice
// and the table. Precedence: a valid retry extension overrides the table
// (allowed:false always forbids a resend); Retry-After replaces the
// table's wait for fixed strategies and for 429/503 and is otherwise a
// floor; a body that is not the API's shape leaves the status's row alone.
func advise(v *verdict, e attemptEnd, now time.Time) {
	attempt := max(e.attempt, 1)
	var ext operation.RetryExtension
	var hasExt bool
	if eb, err := operation.ParseErrorBody(e.body); err == nil {
		v.code, v.message = eb.Code(), eb.Message()
		ext, hasExt = eb.Retry()
	}
	r := operation.TableRule(e.status, v.code)
	retry, maxAttempts, base := r.Retry, r.MaxAttempts, r.Delay
	v.strategy = r.Strategy
	if hasExt {
		v.fromServer = true
		if !ext.Allowed {
			v.kind, v.strategy = permanent, ""
			return
		}
		retry = true
		if ext.Strategy != "" {
			v.strategy = ext.Strategy
		} else if v.strategy == "" {
			v.strategy = operation.StrategyFixed // allowed on a status the table never resends
		}
		if ext.After > 0 {
			base, v.floor = ext.After, ext.After
		}
		if ext.MaxAttempts > 0 {
			maxAttempts = ext.MaxAttempts
		}
	}
	if !retry {
		v.kind = permanent
		return
	}
	if maxAttempts > 0 && attempt >= maxAttempts {
		v.kind, v.exhausted = permanent, true
		return
	}
	if base == 0 && v.strategy == operation.StrategyExponential {
		base = time.Second // the server chose exponential without a start
	}
	v.wait = strategyDelay(v.strategy, base, attempt)
	throttle := e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable
	var header time.Duration // Retry-After's wait
	if ra, ok := operation.ParseRetryAfter(e.header.Get("Retry-After"), now); ok {
		header = ra
		if (v.strategy == operation.StrategyFixed || throttle) && (!hasExt || ext.After == 0) {
			// The header is the server's own word on this wait; the
			// table's 60 s for 429 is only for when it says nothing.
			v.wait = ra
		}
		v.wait = max(v.wait, ra)
		v.floor = max(v.floor, ra)
	}
	// A throttle whose wait the provider set at a second or more spares
	// the run's retry budget (verdict.sparesBudget). Retry-After counts in
	// whole seconds: any wait it names is one, though an HTTP date a
	// second ahead leaves less of it by the time it is read. A retry
	// extension's "after" counts by the wait its strategy makes of it
	// (immediate: none). The table's wait for a throttle that named none
	// is tilectl's, not the provider's: it spares nothing.
	v.spare = throttle && (header > 0 || v.floor > 0 && v.wait >= time.Second)
	switch {
	case throttle:
		v.kind = throttled
	case v.floor > 0:
		v.kind = retryAfter
	default:
		v.kind = retryBackoff
	}
}

// strategyDelay is the wait before attempt+1: immediate 0, fixed base,
// exponential base*2^(attempt-1), saturating at operation.MaxHintDelay.
func strategyDelay(s operation.Strategy, base time.Duration, attempt int) time.Duration {
	switch s {
	case operation.StrategyImmediate:
		return 0
	case operation.StrategyExponential:
		return operation.Backoff{Base: base}.Delay(attempt, nil, 0)
	}
	return base
}

// bound fits a wait into the sender's limits: cut to capDelay (0: no cap)
// but never below the provider's floor. ok is false when the floor is over
// the cap or the wait would not end before the deadline (remaining); the
// duration is then the wait that would have been needed, for the report.
func bound(wait, floor, capDelay, remaining time.Duration) (time.Duration, bool) {
	d := wait
	if capDelay > 0 && d > capDelay {
		if floor > capDelay {
			return floor, false
		}
		d = max(capDelay, floor)
	}
	if d >= remaining {
		return d, false
	}
	return d, true
}
