package operation

import (
	"net/http"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func TestDefaultRuleFollowsTheProviderTable(t *testing.T) {
	t.Parallel()
	no := Rule{}
	tests := []struct {
		status int
		code   string
		want   Rule
	}{
		{400, CodeInvalidRequest, no},
		{400, CodeIdempotencyKeyMissing, no},
		{401, CodeUnauthenticated, no},
		{403, CodeForbidden, no},
		{404, CodeFlightNotFound, no},
		{409, CodeIdempotencyProcessing, Rule{Retry: true, Strategy: StrategyFixed, Delay: time.Second}},
		{409, "", Rule{Retry: true, Strategy: StrategyFixed, Delay: time.Second}},
		{409, CodeSequenceGap, no},
		{409, CodeAlreadyCommitted, no},
		{413, CodeBatchTooLarge, no},
		{422, CodeIdempotencyConflict, no},
		{422, CodeIdempotencyExpired, no},
		{429, CodeRateLimited, Rule{Retry: true, Strategy: StrategyFixed, Delay: 60 * time.Second}},
		{429, "", Rule{Retry: true, Strategy: StrategyFixed, Delay: 60 * time.Second}},
		{500, CodeInternalError, Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second, MaxAttempts: 3}},
		{500, "", Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second, MaxAttempts: 3}},
		{500, CodeIndeterminate, Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second}},
		{502, CodeDependencyError, Rule{Retry: true, Strategy: StrategyExponential, Delay: 2 * time.Second}},
		{503, CodeUnavailable, Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second}},
		{504, CodeDeadlineExceeded, Rule{Retry: true, Strategy: StrategyImmediate}},
		{507, "", Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second}},
		{599, "WHATEVER", Rule{Retry: true, Strategy: StrategyExponential, Delay: time.Second}},
		{418, "", no},
		{408, "", no},
		{200, "", no},
		{302, "", no},
		{0, "", no},
	}
	for _, tt := range tests {
		if got := DefaultRule(tt.status, tt.code); got != tt.want {
			t.Errorf("DefaultRule(%d, %q) = %+v, want %+v", tt.status, tt.code, got, tt.want)
		}
	}
}

func body(code, ext string) []byte {
	s := `{"errors":[{"code":"` + code + `","message":"m"}]`
	if ext != "" {
		s += `,"extensions":[{"urn":"urn:forrst:ext:retry","data":` + ext + `}]`
	}
	return []byte(s + "}")
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestAdvise(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		h         http.Header
		body      []byte
		attempt   int
		wantRetry bool
		wantDelay time.Duration
		wantStrat Strategy
		wantMax   int
		wantExh   bool
		wantSrv   bool
	}{
		{"429 default waits 60s", 429, nil, body(CodeRateLimited, ""), 1, true, 60 * time.Second, StrategyFixed, 0, false, false},
		{"429 Retry-After seconds replaces 60s", 429, hdr("Retry-After", "5"), body(CodeRateLimited, ""), 1, true, 5 * time.Second, StrategyFixed, 0, false, false},
		{"429 Retry-After date", 429, hdr("Retry-After", t0.Add(30*time.Second).Format(http.TimeFormat)), nil, 1, true, 30 * time.Second, StrategyFixed, 0, false, false},
		{"429 Retry-After in the past is 0", 429, hdr("Retry-After", t0.Add(-time.Hour).Format(http.TimeFormat)), nil, 1, true, 0, StrategyFixed, 0, false, false},
		{"429 ext after replaces 60s", 429, nil, body(CodeRateLimited, `{"allowed":true,"after":{"value":5,"unit":"second"},"strategy":"fixed","max_attempts":3}`), 1, true, 5 * time.Second, StrategyFixed, 3, false, true},
		{"429 ext after and longer Retry-After: the longer wins", 429, hdr("Retry-After", "9"), body(CodeRateLimited, `{"allowed":true,"after":{"value":5,"unit":"second"}}`), 1, true, 9 * time.Second, StrategyFixed, 0, false, true},
		{"ext allowed false wins over a retryable status", 503, hdr("Retry-After", "1"), body(CodeUnavailable, `{"allowed":false}`), 1, false, 0, "", 0, false, true},
		{"ext allowed true on a 400", 400, nil, body(CodeInvalidRequest, `{"allowed":true,"after":{"value":200,"unit":"millisecond"}}`), 1, true, 200 * time.Millisecond, StrategyFixed, 0, false, true},
		{"ext exponential grows from after", 503, nil, body(CodeUnavailable, `{"allowed":true,"after":{"value":2,"unit":"second"},"strategy":"exponential"}`), 3, true, 8 * time.Second, StrategyExponential, 0, false, true},
		{"ext max_attempts reached", 503, nil, body(CodeUnavailable, `{"allowed":true,"max_attempts":2}`), 2, false, 0, StrategyExponential, 2, true, true},
		{"invalid ext falls back to the table", 503, nil, body(CodeUnavailable, `{"allowed":"yes"}`), 1, true, time.Second, StrategyExponential, 0, false, false},
		{"500 internal grows 1s 2s", 500, nil, body(CodeInternalError, ""), 2, true, 2 * time.Second, StrategyExponential, 3, false, false},
		{"500 internal stops at 3 attempts", 500, nil, body(CodeInternalError, ""), 3, false, 0, StrategyExponential, 3, true, false},
		{"500 indeterminate has no table limit", 500, nil, body(CodeIndeterminate, ""), 5, true, 16 * time.Second, StrategyExponential, 0, false, false},
		{"502 from 2s", 502, nil, body(CodeDependencyError, ""), 1, true, 2 * time.Second, StrategyExponential, 0, false, false},
		{"503 Retry-After replaces exponential", 503, hdr("Retry-After", "7"), body(CodeUnavailable, ""), 4, true, 7 * time.Second, StrategyExponential, 0, false, false},
		{"502 Retry-After is a floor", 502, hdr("Retry-After", "1"), body(CodeDependencyError, ""), 2, true, 4 * time.Second, StrategyExponential, 0, false, false},
		{"504 immediate", 504, nil, body(CodeDeadlineExceeded, ""), 1, true, 0, StrategyImmediate, 0, false, false},
		{"HTML 503 page: status default", 503, hdr("Content-Type", "text/html"), []byte("<html><body>503 Service Unavailable</body></html>"), 1, true, time.Second, StrategyExponential, 0, false, false},
		{"cut body: status default", 429, nil, body(CodeRateLimited, `{"allowed":false}`)[:40], 1, true, 60 * time.Second, StrategyFixed, 0, false, false},
		{"empty body 502", 502, nil, nil, 2, true, 4 * time.Second, StrategyExponential, 0, false, false},
		{"422 conflict not retried", 422, nil, body(CodeIdempotencyConflict, ""), 1, false, 0, "", 0, false, false},
		{"409 processing fixed 1s", 409, nil, body(CodeIdempotencyProcessing, ""), 7, true, time.Second, StrategyFixed, 0, false, false},
		{"garbage Retry-After ignored", 429, hdr("Retry-After", "soon"), nil, 1, true, 60 * time.Second, StrategyFixed, 0, false, false},
		{"attempt 0 treated as 1", 503, nil, nil, 0, true, time.Second, StrategyExponential, 0, false, false},
		{"2xx is never retried whatever the body says", 200, nil, body("", `{"allowed":true}`), 1, false, 0, "", 0, false, false},
		{"ext exponential without after starts at 1s", 400, nil, body(CodeInvalidRequest, `{"allowed":true,"strategy":"exponential"}`), 2, true, 2 * time.Second, StrategyExponential, 0, false, true},
		{"huge attempt saturates", 503, nil, nil, 1 << 30, true, MaxHintDelay, StrategyExponential, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h
			if h == nil {
				h = http.Header{}
			}
			a := Advise(tt.status, h, tt.body, tt.attempt, t0)
			if a.Retry != tt.wantRetry || a.Delay != tt.wantDelay || a.Strategy != tt.wantStrat ||
				a.MaxAttempts != tt.wantMax || a.Exhausted != tt.wantExh || a.FromServer != tt.wantSrv || a.Status != tt.status {
				t.Errorf("Advise = %+v\nwant retry=%v delay=%v strategy=%q max=%d exhausted=%v fromServer=%v",
					a, tt.wantRetry, tt.wantDelay, tt.wantStrat, tt.wantMax, tt.wantExh, tt.wantSrv)
			}
		})
	}
}

func TestAdviseReportsCodeAndMessage(t *testing.T) {
	t.Parallel()
	a := Advise(429, http.Header{}, []byte(`{"errors":[{"code":"RATE_LIMITED","message":"Too many requests"}]}`), 1, t0)
	if a.Code != CodeRateLimited || a.Message != "Too many requests" {
		t.Fatalf("code %q message %q", a.Code, a.Message)
	}
}

func TestBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		a         Advice
		cap, rem  time.Duration
		wantDelay time.Duration
		wantOK    bool
	}{
		{"no retry", Advice{}, 0, NoDeadline, 0, false},
		{"fits", Advice{Retry: true, Delay: 2 * time.Second}, 10 * time.Second, time.Minute, 2 * time.Second, true},
		{"table delay is capped", Advice{Retry: true, Delay: 64 * time.Second}, 10 * time.Second, time.Minute, 10 * time.Second, true},
		{"server minimum above the cap is refused", Advice{Retry: true, Delay: 120 * time.Second, MinDelay: 120 * time.Second}, 30 * time.Second, NoDeadline, 120 * time.Second, false},
		{"capping keeps the server minimum", Advice{Retry: true, Delay: 80 * time.Second, MinDelay: 20 * time.Second}, 30 * time.Second, NoDeadline, 30 * time.Second, true},
		{"wait past the deadline is refused", Advice{Retry: true, Delay: 60 * time.Second}, 0, 59 * time.Second, 60 * time.Second, false},
		{"wait equal to the deadline leaves no time for the attempt", Advice{Retry: true, Delay: 5 * time.Second}, 0, 5 * time.Second, 5 * time.Second, false},
		{"no cap no deadline", Advice{Retry: true, Delay: MaxHintDelay}, 0, NoDeadline, MaxHintDelay, true},
	}
	for _, tt := range tests {
		d, ok := tt.a.Bound(tt.cap, tt.rem)
		if d != tt.wantDelay || ok != tt.wantOK {
			t.Errorf("%s: Bound = %v, %v; want %v, %v", tt.name, d, ok, tt.wantDelay, tt.wantOK)
		}
	}
}

func BenchmarkAdvise(b *testing.B) {
	h := hdr("Retry-After", "5")
	bd := body(CodeRateLimited, `{"allowed":true,"after":{"value":5,"unit":"second"},"strategy":"fixed","max_attempts":3}`)
	b.ReportAllocs()
	for b.Loop() {
		Advise(429, h, bd, 1, t0)
	}
}

func BenchmarkAdviseHTML(b *testing.B) {
	bd := []byte("<html><body>502 Bad Gateway</body></html>")
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		Advise(502, h, bd, 2, t0)
	}
}
