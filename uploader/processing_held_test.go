package uploader_test

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// A provider that answers every send of a key 409 IDEMPOTENCY_PROCESSING
// (it holds the key as still running, and may have lost track of it) gets
// a run error that names the batch's key, says the provider holds it as
// processing and that the next run resends it under the same key, and
// where to look if it never clears: not a bare status.
func TestAKeyTheProviderHoldsAsProcessingIsNamedPlainly(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	key := ""
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		mu.Lock()
		key = b.Key
		mu.Unlock()
		operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing,
			"a request with this Idempotency-Key is still in progress", nil, nil)
	})
	c := providertest.NewClient(t, "fp")
	c.AddTiles(t, "fp", 2, 256, 4)
	u, _ := newUploader(t, hs.URL, c, nil)

	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fp", Concurrency: 1})
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Code != operation.CodeIdempotencyProcessing {
		t.Fatalf("run: %v, want the provider's 409 IDEMPOTENCY_PROCESSING", err)
	}
	mu.Lock()
	defer mu.Unlock()
	msg := err.Error()
	for _, want := range []string{key, "holds this batch's key as still processing", "same key", "docs/operations.md"} {
		if key == "" || !strings.Contains(msg, want) {
			t.Errorf("run error %q does not say %q", msg, want)
		}
	}
	if n := len(openBatches(t, c, "fp")); n != 1 {
		t.Fatalf("%d open batches, want the one whose key the provider holds", n)
	}
}
