package operation

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseErrorBody(t *testing.T) {
	t.Parallel()
	eb, err := ParseErrorBody([]byte(`{"errors":[{"code":"SEQUENCE_GAP","message":"gap","details":{"last_committed_sequence":4}}],
		"extensions":[{"urn":"urn:other","data":1},{"urn":"urn:forrst:ext:retry","data":{"allowed":true,"after":{"value":5,"unit":"second"}}}],
		"protocol":{"name":"forrst"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if eb.Code() != CodeSequenceGap || eb.Message() != "gap" || string(eb.Errors[0].Details) != `{"last_committed_sequence":4}` {
		t.Fatalf("body = %+v", eb)
	}
	ext, ok := eb.Retry()
	if !ok || !ext.Allowed || ext.After != 5*time.Second {
		t.Fatalf("Retry() = %+v, %v", ext, ok)
	}
}

func TestParseErrorBodyRejectsWhatIsNotTheShape(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`<html>502</html>`,
		`{"errors":[{"code":"RATE_LI`,
		`{"errors":{"code":"X"}}`,
		`{"errors":[{"code":5}]}`,
		`{"extensions":[{"urn":true}]}`,
		`[]`,
		`{"errors":[]} trailing`,
	} {
		if eb, err := ParseErrorBody([]byte(in)); err == nil {
			t.Errorf("ParseErrorBody(%q) = %+v, want an error", in, eb)
		}
	}
	big := []byte(`{"errors":[{"code":"X","message":"` + strings.Repeat("a", MaxErrorBodyBytes) + `"}]}`)
	if _, err := ParseErrorBody(big); !errors.Is(err, ErrErrorBodyTooLarge) {
		t.Errorf("oversized body: err = %v, want ErrErrorBodyTooLarge", err)
	}
	if _, err := ReadErrorBody(strings.NewReader(string(big))); !errors.Is(err, ErrErrorBodyTooLarge) {
		t.Errorf("oversized stream: err = %v, want ErrErrorBodyTooLarge", err)
	}
}

func TestRetryIgnoresAnInvalidExtension(t *testing.T) {
	t.Parallel()
	eb, err := ParseErrorBody([]byte(`{"errors":[],"extensions":[{"urn":"urn:forrst:ext:retry","data":{"allowed":true,"after":{"value":1,"unit":"day"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if ext, ok := eb.Retry(); ok {
		t.Fatalf("Retry() = %+v, want none", ext)
	}
	if eb.Code() != "" {
		t.Fatalf("Code() = %q", eb.Code())
	}
}

func TestWriteErrorProducesWhatAdviseReads(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	WriteError(rec, 429, CodeRateLimited, "Too many requests",
		&RetryExtension{Allowed: true, After: 1500 * time.Millisecond, Strategy: StrategyFixed, MaxAttempts: 3},
		map[string]int{"limit": 10})
	res := rec.Result()
	if res.StatusCode != 429 || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d content-type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if got := res.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (rounded up)", got)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("body %s: %v", rec.Body, err)
	}
	eb, err := ParseErrorBody(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if string(eb.Errors[0].Details) != `{"limit":10}` {
		t.Errorf("details = %s", eb.Errors[0].Details)
	}
	ext, ok := eb.Retry()
	ra, raOK := ParseRetryAfter(res.Header.Get("Retry-After"), t0)
	if !ok || !ext.Allowed || eb.Code() != CodeRateLimited || ext.MaxAttempts != 3 || !raOK || ra != 2*time.Second {
		t.Errorf("read back: code %q, extension %+v (%v), Retry-After %v (%v)", eb.Code(), ext, ok, ra, raOK)
	}
}

func TestWriteErrorWithoutRetryOrDetails(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusNotFound, CodeFlightNotFound, "no such flight", nil, func() {})
	if rec.Header().Get("Retry-After") != "" {
		t.Error("Retry-After set without a retry extension")
	}
	want := `{"errors":[{"code":"FLIGHT_NOT_FOUND","message":"no such flight"}]}` + "\n"
	if rec.Body.String() != want {
		t.Errorf("body = %s, want %s", rec.Body, want)
	}
}

func FuzzParseErrorBody(f *testing.F) {
	f.Add([]byte(`{"errors":[{"code":"RATE_LIMITED","message":"Too many requests"}],"extensions":[{"urn":"urn:forrst:ext:retry","data":{"allowed":true,"after":{"value":5,"unit":"second"},"strategy":"fixed","max_attempts":3}}]}`))
	f.Add([]byte(`<html><body>Bad Gateway</body></html>`))
	f.Add([]byte(`{"errors":[{"code":"X","details":{"a":[1,2]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		eb, err := ParseErrorBody(b)
		if err != nil {
			return
		}
		_ = eb.Code()
		ext, ok := eb.Retry()
		if ok && (ext.After < 0 || ext.After > MaxHintDelay) {
			t.Fatalf("after out of range: %+v", ext)
		}
		// What a server writes from the parsed body parses back the same.
		rec := httptest.NewRecorder()
		var rp *RetryExtension
		if ok {
			rp = &ext
		}
		WriteError(rec, 503, eb.Code(), eb.Message(), rp, nil)
		back, err := ParseErrorBody(rec.Body.Bytes())
		if err != nil {
			t.Fatalf("reparse %s: %v", rec.Body, err)
		}
		if back.Code() != eb.Code() || back.Message() != eb.Message() {
			t.Fatalf("round trip changed code/message: %+v -> %+v", eb, back)
		}
	})
}
