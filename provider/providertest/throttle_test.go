package providertest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The throttle lets a burst through, then perSecond a second, and answers
// the rest 429 with Retry-After: 1; requests other than batches pass.
func TestThrottleAllowsItsRateAndRefusesTheRest(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	th := NewThrottle(ok, 20, 5)
	t0 := time.Now()
	allowed := 0
	for range 50 {
		if th.take(t0) {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("at one instant %d of 50 allowed, want the burst of 5", allowed)
	}
	allowed = 0
	for i := range 100 { // one second, a request every 10 ms
		if th.take(t0.Add(time.Duration(i+1) * 10 * time.Millisecond)) {
			allowed++
		}
	}
	if allowed != 20 {
		t.Fatalf("over a second at 100 requests/s, %d allowed, want 20", allowed)
	}

	th.Reset()
	for range 10 {
		rec := httptest.NewRecorder()
		th.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/flights/f/tiles:batch", nil))
		if rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("a 429 without Retry-After: 1: %v", rec.Header())
		}
	}
	if s := th.Stats(); s.Posts != 10 || s.Refused != 5 || s.Admitted != 5 {
		t.Fatalf("10 batch posts at once: %+v; want 10 counted, 5 refused, 5 admitted", s)
	}
	rec := httptest.NewRecorder()
	th.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/capabilities", nil))
	if rec.Code != http.StatusOK || th.Stats().Posts != 10 {
		t.Fatalf("capabilities through the throttle: %d, posts %d", rec.Code, th.Stats().Posts)
	}
}
