package operation

import (
	"math"
	"net/http"
	"time"
)

// Rule is the retry behaviour of one (status, code) when the server's body
// says nothing about retrying.
type Rule struct {
	Retry    bool
	Strategy Strategy
	// Delay is the fixed wait, or the first wait of an exponential backoff.
	Delay time.Duration
	// MaxAttempts counts attempts in all, the first included; 0 = no limit
	// from the table (the caller's own limit applies).
	MaxAttempts int
}

var noRetry = Rule{}

// DefaultRule is the table of docs/provider-api.md ("Errors and retry advice").
// Statuses the table does not name: any other 5xx backs off exponentially
// from 1 s, anything else is not retried. Where the code is unknown or
// absent (an HTML error page), the status's own row applies.
func DefaultRule(status int, code string) Rule {
	switch status {
	case http.StatusConflict:
		// Other 409s (ALREADY_COMMITTED, SEQUENCE_GAP) need the caller to
		// look at its state; resending blindly would not change the answer.
		if code == CodeIdempotencyProcessing || code == "" {
			return Rule{Retry: true, Strategy: StrategyFixed, Delay: time.Second}
		}
		return noRetry
	case http.StatusTooManyRequests:
		return Rule{Retry: true, Strategy: StrategyFixed, Delay: 60 * time.Second}
	case http.StatusInternalServerError:
		if code == CodeIndeterminate {
			// "Same key again (the server decides)": the key is reused on
			// every retry anyway; back off as for any server fault, with no
			// table limit because the server, not the count, settles it.
			return Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second}
		}
		return Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second, MaxAttempts: 3}
	case http.StatusBadGateway:
		return Rule{Retry: true, Strategy: StrategyExponential, Delay: 2 * time.Second}
	case http.StatusServiceUnavailable:
		return Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second}
	case http.StatusGatewayTimeout:
		return Rule{Retry: true, Strategy: StrategyImmediate}
	}
	if status >= 500 && status <= 599 {
		return Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second}
	}
	// 400, 401, 403, 404, 413, 422, every other 4xx, and non-errors.
	return noRetry
}

// Advice is what to do after one failed attempt.
type Advice struct {
	Retry    bool
	Delay    time.Duration // wait before the next attempt
	Strategy Strategy
	// MaxAttempts in all, from the server's extension or the table; 0 = no
	// limit from either.
	MaxAttempts int
	// Exhausted is set when Retry is false only because attempt reached
	// MaxAttempts.
	Exhausted bool
	// MinDelay is the least wait the server asked for (its "after" or
	// Retry-After); Bound will not shorten the wait below it.
	MinDelay time.Duration

	Status  int
	Code    string
	Message string
	// FromServer is set when the body carried a valid retry extension.
	FromServer bool
}

// Advise decides whether and when to retry after an answer with the given
// status, headers and body. attempt is the number of attempts made so far
// (1 after the first failure); it drives exponential growth and the
// attempt limit.
//
// Precedence: a valid retry extension in the body overrides the table
// (allowed:false always means no retry); a Retry-After header replaces the
// table's wait for fixed strategies and for 429/503 and is otherwise a floor;
// a body that is not the API's shape leaves the status's default alone.
func Advise(status int, h http.Header, body []byte, attempt int, now time.Time) Advice {
	if attempt < 1 {
		attempt = 1
	}
	a := Advice{Status: status}
	var ext RetryExtension
	var hasExt bool
	if eb, err := ParseErrorBody(body); err == nil {
		a.Code, a.Message = eb.Code(), eb.Message()
		ext, hasExt = eb.Retry()
	}
	if status < 400 || status > 599 {
		return a // not an error answer: nothing to retry, whatever the body says
	}
	rule := DefaultRule(status, a.Code)
	a.Retry, a.Strategy, a.MaxAttempts = rule.Retry, rule.Strategy, rule.MaxAttempts
	base := rule.Delay
	if hasExt {
		a.FromServer = true
		if !ext.Allowed {
			a.Retry, a.Strategy, a.MaxAttempts = false, "", 0
			return a
		}
		a.Retry = true
		if ext.Strategy != "" {
			a.Strategy = ext.Strategy
		} else if a.Strategy == "" {
			a.Strategy = StrategyFixed // allowed on a status the table never retries
		}
		if ext.After > 0 {
			base, a.MinDelay = ext.After, ext.After
		}
		if ext.MaxAttempts > 0 {
			a.MaxAttempts = ext.MaxAttempts
		}
	}
	if !a.Retry {
		return a
	}
	if a.MaxAttempts > 0 && attempt >= a.MaxAttempts {
		a.Retry, a.Exhausted = false, true
		return a
	}
	if base == 0 && a.Strategy == StrategyExponential {
		base = time.Second // the server chose exponential without a start
	}
	a.Delay = strategyDelay(a.Strategy, base, attempt)
	if ra, ok := ParseRetryAfter(h.Get("Retry-After"), now); ok {
		replaces := a.Strategy == StrategyFixed || status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
		if replaces && (!hasExt || ext.After == 0) {
			// The header is the server's own word on this wait; the table's
			// 60 s for 429 is only a fallback for when it says nothing.
			a.Delay = ra
		}
		a.Delay = max(a.Delay, ra)
		a.MinDelay = max(a.MinDelay, ra)
	}
	return a
}

// strategyDelay is the wait before attempt+1: immediate 0, fixed base,
// exponential base*2^(attempt-1), saturating at MaxHintDelay.
func strategyDelay(s Strategy, base time.Duration, attempt int) time.Duration {
	switch s {
	case StrategyImmediate:
		return 0
	case StrategyExponential:
		return expDelay(base, attempt, MaxHintDelay)
	}
	return base
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

// NoDeadline is the remaining time to pass to Bound when there is none.
const NoDeadline = time.Duration(math.MaxInt64)

// Bound fits the advised wait into the caller's limits: the wait is cut to
// capDelay (0 = no cap) but never below what the server asked for
// (MinDelay). ok is false when no retry is advised, when the server's
// minimum exceeds capDelay, or when the wait would not end before the
// deadline (remaining); the returned duration is then the wait that would
// have been needed, for the caller's report. A caller gives up on false
// instead of sleeping into a deadline it cannot meet.
func (a Advice) Bound(capDelay, remaining time.Duration) (time.Duration, bool) {
	if !a.Retry {
		return 0, false
	}
	d := a.Delay
	if capDelay > 0 && d > capDelay {
		if a.MinDelay > capDelay {
			return a.MinDelay, false
		}
		d = max(capDelay, a.MinDelay)
	}
	if d >= remaining {
		return d, false
	}
	return d, true
}
