package uploader_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// refuseFirst is a provider front that answers the first request of each
// Idempotency-Key 429 RATE_LIMITED with Retry-After: 1, as a throttle
// whose burst let many batches start at once refuses all of them, and
// passes every later request of the key through.
type refuseFirst struct {
	inner http.Handler
	mu    sync.Mutex
	seen  map[string]int // Idempotency-Key -> requests
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
		w.Header().Set("Retry-After", "1")
		operation.WriteError(w, http.StatusTooManyRequests, operation.CodeRateLimited, "slow down", nil, nil)
		return
	}
	f.inner.ServeHTTP(w, r)
}

// TestResendsAProviderAskedForByNamingAWaitTakeNoResendBudget: the run's
// retry budget bounds the resends tilectl decides on its own; a batch the
// provider refused with Retry-After goes again when the provider said,
// however many batches it refused at once, and the run finishes at the
// default budget with every batch sent twice under its one key.
func TestResendsAProviderAskedForByNamingAWaitTakeNoResendBudget(t *testing.T) {
	t.Parallel()
	const batches, perBatch = 40, 2
	p := providertest.Start(t, nil)
	f := &refuseFirst{inner: p.Server.Handler(), seen: map[string]int{}}
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	c := providertest.NewClient(t, "fra")
	c.AddTiles(t, "fra", batches*perBatch, 256, 1)
	clk := newFakeClock()
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Now, o.Sleep = clk.Now, clk.Sleep // the retry budget at its defaults: 10 + 20% of first attempts, fewer than the refusals
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fra", BatchSize: perBatch})
	if err != nil || rep.Accepted != batches*perBatch || rep.Pending != 0 {
		t.Fatalf("UploadPendingTiles: accepted %d, pending %d, err %v; want all %d accepted in this run",
			rep.Accepted, rep.Pending, err, batches*perBatch)
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
}
