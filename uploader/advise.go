package uploader

import (
	"net/http"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// rule is the contract table's word on one (status, code) when the answer
// gives no advice (docs/provider-api.md, "Errors and retry advice").
type rule struct {
	retry    bool
	strategy operation.Strategy
	// delay is the fixed wait, or the first of an exponential backoff.
	delay time.Duration
	// maxAttempts counts attempts in all, the first included; 0: no limit
	// from the table (the sender's resends apply).
	maxAttempts int
}

// tableRule is the contract's table. Statuses it does not name: any other
// 5xx backs off from 1 s, anything else is not resent. Where the code is
// unknown or absent (an HTML error page), the status's own row applies.
func tableRule(status int, code string) rule {
	switch status {
	case http.StatusConflict:
		// Other 409s (ALREADY_COMMITTED, SEQUENCE_GAP) need the caller to
		// look at its state; resending blindly would not change the answer.
		if code == operation.CodeIdempotencyProcessing || code == "" {
			return rule{retry: true, strategy: operation.StrategyFixed, delay: time.Second}
		}
		return rule{}
	case http.StatusTooManyRequests:
		return rule{retry: true, strategy: operation.StrategyFixed, delay: 60 * time.Second}
	case http.StatusInternalServerError:
		if code == operation.CodeIndeterminate {
			// "Under the same key; the server decides": no table limit,
			// because the server, not the count, settles it.
			return rule{retry: true, strategy: operation.StrategyExponential, delay: time.Second}
		}
		return rule{retry: true, strategy: operation.StrategyExponential, delay: time.Second, maxAttempts: 3}
	case http.StatusBadGateway:
		return rule{retry: true, strategy: operation.StrategyExponential, delay: 2 * time.Second}
	case http.StatusServiceUnavailable:
		return rule{retry: true, strategy: operation.StrategyExponential, delay: time.Second}
	case http.StatusGatewayTimeout:
		return rule{retry: true, strategy: operation.StrategyImmediate}
	}
	if status >= 500 && status <= 599 {
		return rule{retry: true, strategy: operation.StrategyExponential, delay: time.Second}
	}
	// 400, 401, 403, 404, 413, 422 and every other 4xx.
	return rule{}
}

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
	r := tableRule(e.status, v.code)
	retry, maxAttempts, base := r.retry, r.maxAttempts, r.delay
	v.strategy = r.strategy
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
	if ra, ok := operation.ParseRetryAfter(e.header.Get("Retry-After"), now); ok {
		if (v.strategy == operation.StrategyFixed || throttle) && (!hasExt || ext.After == 0) {
			// The header is the server's own word on this wait; the
			// table's 60 s for 429 is only for when it says nothing.
			v.wait = ra
		}
		v.wait = max(v.wait, ra)
		v.floor = max(v.floor, ra)
	}
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
