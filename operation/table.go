package operation

import (
	"net/http"
	"time"
)

// Rule is the contract table's word on one (status, code) when the answer
// gives no advice (docs/provider-api.md, "Errors and retry advice").
type Rule struct {
	Retry    bool
	Strategy Strategy
	// Delay is the fixed wait, or the first of an exponential backoff.
	Delay time.Duration
	// MaxAttempts counts attempts in all, the first included; 0: no limit
	// from the table (the client's own limit applies).
	MaxAttempts int
}

// TableRule is the contract's table, for every client of it (tilectl's
// uploader, the benchmarks' baseline). Statuses it does not name: any other
// 5xx backs off from 1 s, anything else is not resent. Where the code is
// unknown or absent (an HTML error page), the status's own row applies.
func TableRule(status int, code string) Rule {
	switch status {
	case http.StatusConflict:
		// Other 409s (ALREADY_COMMITTED, SEQUENCE_GAP) need the caller to
		// look at its state; resending blindly would not change the answer.
		if code == CodeIdempotencyProcessing || code == "" {
			return Rule{Retry: true, Strategy: StrategyFixed, Delay: time.Second}
		}
		return Rule{}
	case http.StatusTooManyRequests:
		return Rule{Retry: true, Strategy: StrategyFixed, Delay: 60 * time.Second}
	case http.StatusInternalServerError:
		if code == CodeIndeterminate {
			// "Under the same key; the server decides": no table limit,
			// because the server, not the count, settles it.
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
	// 400, 401, 403, 404, 413, 422 and every other 4xx.
	return Rule{}
}
