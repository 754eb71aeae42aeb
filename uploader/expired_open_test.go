package uploader_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// A batch an earlier run left open whose key the provider no longer knows
// (422 IDEMPOTENCY_EXPIRED after a long outage) must not end the next run:
// the batch is failed, its tiles go into a new batch under a new key, and
// the run finishes.
func TestExpiredKeyOfAnEarlierRunsOpenBatchDoesNotEndTheRun(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	phase, oldKey := 1, ""
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case phase == 1:
			oldKey = b.Key
			operation.WriteError(w, http.StatusUnauthorized, operation.CodeUnauthenticated, "token revoked", nil, nil)
		case b.Key == oldKey:
			operation.WriteError(w, http.StatusUnprocessableEntity, operation.CodeIdempotencyExpired, "key expired", nil, nil)
		default:
			answerAll(w, b, "accepted")
		}
	})
	c := providertest.NewClient(t, "fx")
	c.AddTiles(t, "fx", 3, 256, 4)
	u, _ := newUploader(t, hs.URL, c, nil)

	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fx", Concurrency: 1})
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusUnauthorized {
		t.Fatalf("first run: %v, want the 401", err)
	}
	if n := len(openBatches(t, c, "fx")); n != 1 {
		t.Fatalf("first run left %d open batches, want 1", n)
	}

	mu.Lock()
	phase = 2
	mu.Unlock()
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fx", Concurrency: 1})
	if err != nil {
		t.Fatalf("second run ended on the old batch's expired key: %v", err)
	}
	if rep.Uploaded() != 3 || rep.Pending != 0 {
		t.Fatalf("second run report %+v, want all 3 uploaded under a new key", rep)
	}
	if n := len(openBatches(t, c, "fx")); n != 0 {
		t.Fatalf("%d batches still open", n)
	}
}
