package uploader_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// refuseFirst is a provider front that answers the first request of each
// Idempotency-Key 429 RATE_LIMITED with Retry-After, as a throttle
// whose burst let many batches start at once refuses all of them, and
// passes every later request of the key through.
type refuseFirst struct {
	inner http.Handler
	// retryAfter is the Retry-After header's value for a refusal.
	retryAfter func() string
	mu         sync.Mutex
	seen       map[string]int // Idempotency-Key -> requests
}

func (f *refuseFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := r.Header.Get("Idempotency-Key")
	if k == "" {
		f.inner.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	f.seen[k]++
	n := f.seen[k]
	f.mu.Unlock()
	if n == 1 {
		w.Header().Set("Retry-After", f.retryAfter())
		operation.WriteError(w, http.StatusTooManyRequests, operation.CodeRateLimited, "slow down", nil, nil)
		return
	}
	f.inner.ServeHTTP(w, r)
}

// TestResendsAfterAThrottlesWaitTakeNoResendBudget: a batch the provider
// refused for load (429) with Retry-After (in seconds, or as an HTTP date,
// whose whole seconds make a wait a second ahead shorter than a second)
// goes again when the provider said, however many batches it refused at
// once, without a token of the run's retry budget: the run finishes at the
// default budget with every batch sent twice under its one key.
func TestResendsAfterAThrottlesWaitTakeNoResendBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		retryAfter func() string
	}{
		{"Retry-After: 1", func() string { return "1" }},
		{"Retry-After: an HTTP date a second ahead", func() string {
			return time.Now().Add(time.Second).UTC().Format(http.TimeFormat)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const batches, perBatch = 40, 2
			p := providertest.Start(t, nil)
			f := &refuseFirst{inner: p.Server.Handler(), retryAfter: tc.retryAfter, seen: map[string]int{}}
			hs := httptest.NewServer(f)
			t.Cleanup(hs.Close)
			c := providertest.NewClient(t, "fra")
			c.AddTiles(t, "fra", batches*perBatch, 256, 1)
			// The real clock (an HTTP date is read against it), and the
			// retry budget at its defaults: 10 + 20% of first attempts,
			// fewer than the refusals.
			u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = operation.Sleep })
			rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fra", BatchSize: perBatch})
			if err != nil || rep.Accepted != batches*perBatch || rep.Pending != 0 || rep.ResendsRefused != 0 {
				t.Fatalf("UploadPendingTiles: accepted %d, pending %d, resends refused %d, err %v; want all %d accepted in this run",
					rep.Accepted, rep.Pending, rep.ResendsRefused, err, batches*perBatch)
			}
			allUploadedOnce(t, c, p, "fra", batches*perBatch)
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.seen) != batches {
				t.Errorf("%d keys sent, want %d: one per batch", len(f.seen), batches)
			}
			for k, n := range f.seen {
				if n != 2 {
					t.Errorf("key %s sent %d times, want 2: refused once, then sent when the provider said", k, n)
				}
			}
		})
	}
}

// TestAProviderThatAsksForResendsAtOnceIsBoundedByTheRetryBudget: a wait
// the provider names spares the retry budget only for a refusal for load
// (429, 503) that waits at least a second, which the pacer keeps the run
// to. Any other advice (a 409 IDEMPOTENCY_PROCESSING that never settles, a
// 429 naming a millisecond, or a second with the immediate strategy) takes
// a token per resend, so a provider that asks
// for the same request again at once, for ever, meets the budget, not
// only the run's deadline.
func TestAProviderThatAsksForResendsAtOnceIsBoundedByTheRetryBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		status          int
		code            string
		after, strategy string
	}{
		{"409 processing for ever, after 1 ms", http.StatusConflict, operation.CodeIdempotencyProcessing,
			`{"value": 1, "unit": "millisecond"}`, "fixed"},
		{"429 for ever, after 1 ms", http.StatusTooManyRequests, operation.CodeRateLimited,
			`{"value": 1, "unit": "millisecond"}`, "fixed"},
		{"429 for ever, after 1 s but immediate", http.StatusTooManyRequests, operation.CodeRateLimited,
			`{"value": 1, "unit": "second"}`, "immediate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ fakeBatch) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, `{"errors": [{"code": %q, "message": "again"}], "extensions": [{"urn": "urn:forrst:ext:retry",
					"data": {"allowed": true, "after": %s, "strategy": %q}}]}`, tc.code, tc.after, tc.strategy)
			})
			c := providertest.NewClient(t, "fab")
			c.AddTiles(t, "fab", 2, 256, 9)
			const budget = 3
			u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
				o.Sleep = operation.Sleep
				o.ResendBudget, o.ResendRatio = budget, -1
			})
			ctx, cancel := context.WithTimeout(testCtx(t), 3*time.Second)
			defer cancel()
			rep, _ := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fab", BatchSize: 1})
			// Two first sends, and the budget's resends.
			if got := len(f.received()); got > 2+budget {
				t.Fatalf("%d batch requests (report %+v), want at most %d: two first sends and the budget's %d resends",
					got, rep, 2+budget, budget)
			}
			if rep.Pending != 2 || rep.ResendsRefused == 0 {
				t.Fatalf("report %+v: want both tiles left pending and the budget's refusal counted", rep)
			}
		})
	}
}
