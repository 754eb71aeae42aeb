package uploader

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func errBody(code, ext string) []byte {
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

// timeoutErr is a net.Error that timed out, as net/http's client returns.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestClassifyReadsEveryAnswerOfTheContract is the classifier's table:
// every status and code docs/provider-api.md defines, with and without
// advice, the answers it is silent about, transport errors, timeouts and
// malformed bodies, each to one verdict.
func TestClassifyReadsEveryAnswerOfTheContract(t *testing.T) {
	t.Parallel()
	isAnswer := func(b []byte) bool { return string(b) == `{"op_id":"k"}` }
	type want struct {
		kind       verdictKind
		wait       time.Duration
		floor      time.Duration
		own        bool // tilectl's own backoff decides the wait
		keyDead    bool
		exhausted  bool
		failure    bool // a failure for the breaker
		signal     concurrency.Signal
		hasSignal  bool
		timeout    bool
		fromServer bool
	}
	answered := func(w want) want { w.signal, w.hasSignal = concurrency.Answered, true; return w }
	overloaded := func(w want) want { w.signal, w.hasSignal = concurrency.Overloaded, true; return w }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	tests := []struct {
		name string
		e    attemptEnd
		want want
	}{
		// 2xx
		{"200 answer", attemptEnd{status: 200, body: []byte(`{"op_id":"k"}`), accept: isAnswer}, answered(want{kind: done})},
		{"200 without an accept check", attemptEnd{status: 200, body: []byte(`anything`)}, answered(want{kind: done})},
		{"200 cut off", attemptEnd{status: 200, body: []byte(`{"op_`), bodyErr: io.ErrUnexpectedEOF, accept: isAnswer}, answered(want{kind: unclear, own: true})},
		{"200 cut off by a timeout", attemptEnd{status: 200, body: []byte(`{"op_`), bodyErr: timeoutErr{}, accept: isAnswer}, answered(want{kind: unclear, own: true, timeout: true})},
		{"200 not the answer", attemptEnd{status: 200, body: []byte(`<html>`), accept: isAnswer}, answered(want{kind: unclear, own: true})},
		{"200 over the answer cap", attemptEnd{status: 200, body: []byte(`{"op_id":"k"}`), bodyErr: errors.New("answer longer than 8 bytes"), accept: isAnswer}, answered(want{kind: unclear, own: true})},
		// redirects and statuses outside the contract
		{"302 redirect", attemptEnd{status: 302, header: hdr("Location", "https://elsewhere")}, answered(want{kind: permanent})},
		{"101", attemptEnd{status: 101}, answered(want{kind: permanent})},
		// 4xx of the table
		{"400 INVALID_REQUEST", attemptEnd{status: 400, body: errBody(operation.CodeInvalidRequest, "")}, answered(want{kind: permanent, keyDead: true})},
		{"400 IDEMPOTENCY_KEY_MISSING", attemptEnd{status: 400, body: errBody(operation.CodeIdempotencyKeyMissing, "")}, answered(want{kind: permanent, keyDead: true})},
		{"401 UNAUTHENTICATED", attemptEnd{status: 401, body: errBody(operation.CodeUnauthenticated, "")}, answered(want{kind: permanent})},
		{"403 FORBIDDEN", attemptEnd{status: 403, body: errBody(operation.CodeForbidden, "")}, answered(want{kind: permanent})},
		{"404 FLIGHT_NOT_FOUND", attemptEnd{status: 404, body: errBody(operation.CodeFlightNotFound, "")}, answered(want{kind: permanent})},
		{"404 TILE_NOT_FOUND", attemptEnd{status: 404, body: errBody(operation.CodeTileNotFound, "")}, answered(want{kind: permanent})},
		{"404 bare (a gateway's)", attemptEnd{status: 404, body: []byte("not found")}, answered(want{kind: permanent})},
		{"409 IDEMPOTENCY_PROCESSING", attemptEnd{status: 409, body: errBody(operation.CodeIdempotencyProcessing, ""), attempt: 7}, answered(want{kind: retryBackoff, wait: time.Second})},
		{"409 PROCESSING with after", attemptEnd{status: 409, body: errBody(operation.CodeIdempotencyProcessing, `{"allowed":true,"after":{"value":1,"unit":"second"},"strategy":"fixed"}`), header: hdr("Retry-After", "1")},
			answered(want{kind: retryAfter, wait: time.Second, floor: time.Second, fromServer: true})},
		{"409 without a code", attemptEnd{status: 409}, answered(want{kind: retryBackoff, wait: time.Second})},
		{"409 SEQUENCE_GAP", attemptEnd{status: 409, body: errBody(operation.CodeSequenceGap, "")}, answered(want{kind: permanent})},
		{"409 ALREADY_COMMITTED", attemptEnd{status: 409, body: errBody(operation.CodeAlreadyCommitted, "")}, answered(want{kind: permanent})},
		{"413 BATCH_TOO_LARGE", attemptEnd{status: 413, body: errBody(operation.CodeBatchTooLarge, "")}, answered(want{kind: permanent, keyDead: true})},
		{"422 IDEMPOTENCY_CONFLICT", attemptEnd{status: 422, body: errBody(operation.CodeIdempotencyConflict, "")}, answered(want{kind: permanent, keyDead: true})},
		{"422 IDEMPOTENCY_EXPIRED", attemptEnd{status: 422, body: errBody(operation.CodeIdempotencyExpired, "")}, answered(want{kind: permanent, keyDead: true})},
		{"408 (not the contract's)", attemptEnd{status: 408}, answered(want{kind: permanent})},
		{"425 (not the contract's)", attemptEnd{status: 425}, answered(want{kind: permanent})},
		{"418 (not the contract's)", attemptEnd{status: 418}, answered(want{kind: permanent, keyDead: true})},
		{"400 with the extension allowing a resend", attemptEnd{status: 400, body: errBody(operation.CodeInvalidRequest, `{"allowed":true,"after":{"value":200,"unit":"millisecond"}}`)},
			answered(want{kind: retryAfter, wait: 200 * time.Millisecond, floor: 200 * time.Millisecond, keyDead: true, fromServer: true})},
		{"400 extension exponential without after", attemptEnd{status: 400, body: errBody(operation.CodeInvalidRequest, `{"allowed":true,"strategy":"exponential"}`), attempt: 2},
			answered(want{kind: retryBackoff, wait: 2 * time.Second, keyDead: true, fromServer: true})},
		// 429
		{"429 without advice: the table's 60 s", attemptEnd{status: 429, body: errBody(operation.CodeRateLimited, "")}, overloaded(want{kind: throttled, wait: time.Minute})},
		{"429 Retry-After seconds", attemptEnd{status: 429, header: hdr("Retry-After", "5"), body: errBody(operation.CodeRateLimited, "")}, overloaded(want{kind: throttled, wait: 5 * time.Second, floor: 5 * time.Second})},
		{"429 Retry-After date", attemptEnd{status: 429, header: hdr("Retry-After", t0.Add(30*time.Second).Format(http.TimeFormat))}, overloaded(want{kind: throttled, wait: 30 * time.Second, floor: 30 * time.Second})},
		{"429 Retry-After in the past", attemptEnd{status: 429, header: hdr("Retry-After", t0.Add(-time.Hour).Format(http.TimeFormat))}, overloaded(want{kind: throttled})},
		{"429 garbage Retry-After", attemptEnd{status: 429, header: hdr("Retry-After", "soon")}, overloaded(want{kind: throttled, wait: time.Minute})},
		{"429 extension after", attemptEnd{status: 429, body: errBody(operation.CodeRateLimited, `{"allowed":true,"after":{"value":5,"unit":"second"},"strategy":"fixed","max_attempts":3}`)},
			overloaded(want{kind: throttled, wait: 5 * time.Second, floor: 5 * time.Second, fromServer: true})},
		{"429 extension after and a longer Retry-After", attemptEnd{status: 429, header: hdr("Retry-After", "9"), body: errBody(operation.CodeRateLimited, `{"allowed":true,"after":{"value":5,"unit":"second"}}`)},
			overloaded(want{kind: throttled, wait: 9 * time.Second, floor: 9 * time.Second, fromServer: true})},
		{"429 extension max_attempts reached", attemptEnd{status: 429, body: errBody(operation.CodeRateLimited, `{"allowed":true,"max_attempts":2}`), attempt: 2},
			overloaded(want{kind: permanent, exhausted: true, fromServer: true})},
		{"429 cut body: the status alone", attemptEnd{status: 429, body: errBody(operation.CodeRateLimited, `{"allowed":false}`)[:40]}, overloaded(want{kind: throttled, wait: time.Minute})},
		// 5xx
		{"500 INTERNAL_ERROR first", attemptEnd{status: 500, body: errBody(operation.CodeInternalError, ""), attempt: 1}, want{kind: retryBackoff, wait: time.Second, failure: true}},
		{"500 INTERNAL_ERROR second", attemptEnd{status: 500, body: errBody(operation.CodeInternalError, ""), attempt: 2}, want{kind: retryBackoff, wait: 2 * time.Second, failure: true}},
		{"500 INTERNAL_ERROR third: 3 attempts at most", attemptEnd{status: 500, body: errBody(operation.CodeInternalError, ""), attempt: 3}, want{kind: permanent, exhausted: true, failure: true}},
		{"500 INDETERMINATE has no table limit", attemptEnd{status: 500, body: errBody(operation.CodeIndeterminate, ""), attempt: 5}, want{kind: retryBackoff, wait: 16 * time.Second, failure: true}},
		{"502 DEPENDENCY_ERROR", attemptEnd{status: 502, body: errBody(operation.CodeDependencyError, ""), attempt: 1}, want{kind: retryBackoff, wait: 2 * time.Second, failure: true}},
		{"502 Retry-After is a floor", attemptEnd{status: 502, header: hdr("Retry-After", "1"), body: errBody(operation.CodeDependencyError, ""), attempt: 2},
			want{kind: retryAfter, wait: 4 * time.Second, floor: time.Second, failure: true}},
		{"502 HTML page", attemptEnd{status: 502, header: hdr("Content-Type", "text/html"), body: []byte("<html>Bad Gateway</html>"), attempt: 2}, want{kind: retryBackoff, wait: 4 * time.Second, failure: true}},
		{"503 UNAVAILABLE", attemptEnd{status: 503, body: errBody(operation.CodeUnavailable, ""), attempt: 1}, overloaded(want{kind: throttled, wait: time.Second, failure: true})},
		{"503 Retry-After replaces the backoff", attemptEnd{status: 503, header: hdr("Retry-After", "7"), body: errBody(operation.CodeUnavailable, ""), attempt: 4},
			overloaded(want{kind: throttled, wait: 7 * time.Second, floor: 7 * time.Second, failure: true})},
		{"503 extension forbids", attemptEnd{status: 503, header: hdr("Retry-After", "1"), body: errBody(operation.CodeUnavailable, `{"allowed":false}`)},
			overloaded(want{kind: permanent, failure: true, fromServer: true})},
		{"503 invalid extension: the table", attemptEnd{status: 503, body: errBody(operation.CodeUnavailable, `{"allowed":"yes"}`)}, overloaded(want{kind: throttled, wait: time.Second, failure: true})},
		{"503 extension exponential from after", attemptEnd{status: 503, body: errBody(operation.CodeUnavailable, `{"allowed":true,"after":{"value":2,"unit":"second"},"strategy":"exponential"}`), attempt: 3},
			overloaded(want{kind: throttled, wait: 8 * time.Second, floor: 2 * time.Second, failure: true, fromServer: true})},
		{"503 huge attempt saturates", attemptEnd{status: 503, attempt: 1 << 30}, overloaded(want{kind: throttled, wait: operation.MaxHintDelay, failure: true})},
		{"504 DEADLINE_EXCEEDED at once", attemptEnd{status: 504, body: errBody(operation.CodeDeadlineExceeded, "")}, want{kind: retryBackoff, failure: true, signal: concurrency.TimedOut, hasSignal: true}},
		{"507 (not named): backing off", attemptEnd{status: 507, attempt: 1}, want{kind: retryBackoff, wait: time.Second, failure: true}},
		// no answer
		{"connection refused: never sent", attemptEnd{err: fmt.Errorf("post: %w", refused)}, want{kind: retryBackoff, own: true, failure: true}},
		{"DNS failure: never sent", attemptEnd{err: &net.DNSError{Err: "no such host", Name: "x.invalid"}}, want{kind: retryBackoff, own: true, failure: true}},
		{"connection reset after sending", attemptEnd{err: fmt.Errorf("post: %w", reset)}, want{kind: unclear, own: true, failure: true}},
		{"EOF before the answer", attemptEnd{err: io.EOF}, want{kind: unclear, own: true, failure: true}},
		{"request timeout", attemptEnd{err: fmt.Errorf("post: %w", timeoutErr{})}, want{kind: unclear, own: true, failure: true, timeout: true, signal: concurrency.TimedOut, hasSignal: true}},
		{"context deadline", attemptEnd{err: context.DeadlineExceeded}, want{kind: unclear, own: true, failure: true, timeout: true, signal: concurrency.TimedOut, hasSignal: true}},
		{"certificate of an unknown authority", attemptEnd{err: fmt.Errorf("tls: %w", x509.UnknownAuthorityError{})}, want{kind: permanent, failure: true}},
		{"certificate for another host", attemptEnd{err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "x"}}, want{kind: permanent, failure: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.e.header == nil {
				tt.e.header = http.Header{}
			}
			v := classify(tt.e, t0)
			got := want{kind: v.kind, wait: v.wait, floor: v.floor, own: v.ownBackoff, keyDead: v.keyDead, exhausted: v.exhausted,
				failure: v.breakerFailure, signal: v.signal, hasSignal: v.hasSignal, timeout: v.timeout, fromServer: v.fromServer}
			if !got.hasSignal {
				got.signal = 0
			}
			if got != tt.want {
				t.Errorf("classify = %+v\n           want %+v", got, tt.want)
			}
			if tt.want.kind != done && tt.e.err == nil && v.status != tt.e.status {
				t.Errorf("status %d, want %d", v.status, tt.e.status)
			}
		})
	}
}

func TestClassifyKeepsTheAnswersCodeAndMessage(t *testing.T) {
	t.Parallel()
	v := classify(attemptEnd{status: 429, header: http.Header{}, body: []byte(`{"errors":[{"code":"RATE_LIMITED","message":"Too many requests"}]}`)}, t0)
	if v.code != operation.CodeRateLimited || v.message != "Too many requests" {
		t.Fatalf("code %q message %q", v.code, v.message)
	}
}

func TestBoundFitsAWaitIntoTheCapAndTheDeadline(t *testing.T) {
	t.Parallel()
	const none = time.Duration(1<<63 - 1)
	tests := []struct {
		name                          string
		wait, floor, capDelay, remain time.Duration
		wantDelay                     time.Duration
		wantOK                        bool
	}{
		{"fits", 2 * time.Second, 0, 10 * time.Second, time.Minute, 2 * time.Second, true},
		{"table wait is capped", 64 * time.Second, 0, 10 * time.Second, time.Minute, 10 * time.Second, true},
		{"provider's floor above the cap is refused", 120 * time.Second, 120 * time.Second, 30 * time.Second, none, 120 * time.Second, false},
		{"capping keeps the provider's floor", 80 * time.Second, 20 * time.Second, 30 * time.Second, none, 30 * time.Second, true},
		{"wait past the deadline is refused", 60 * time.Second, 0, 0, 59 * time.Second, 60 * time.Second, false},
		{"wait equal to the deadline leaves no time for the attempt", 5 * time.Second, 0, 0, 5 * time.Second, 5 * time.Second, false},
		{"no cap no deadline", operation.MaxHintDelay, 0, 0, none, operation.MaxHintDelay, true},
	}
	for _, tt := range tests {
		d, ok := bound(tt.wait, tt.floor, tt.capDelay, tt.remain)
		if d != tt.wantDelay || ok != tt.wantOK {
			t.Errorf("%s: bound = %v, %v; want %v, %v", tt.name, d, ok, tt.wantDelay, tt.wantOK)
		}
	}
}
