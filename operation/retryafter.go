package operation

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter reads a Retry-After header value: delta-seconds or an
// HTTP date (RFC 9110 §10.2.3). A date in the past means 0. ok is false for
// an empty or unreadable value, which callers treat as absent. Values above
// MaxHintDelay are clamped to it, so no input overflows time.Duration.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(MaxHintDelay/time.Second) {
			// Only ErrRange can happen for a string of digits.
			return MaxHintDelay, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	// Sub saturates instead of overflowing for far-apart times.
	d = t.Sub(now)
	switch {
	case d < 0:
		return 0, true
	case d > MaxHintDelay:
		return MaxHintDelay, true
	}
	return d, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0
}
