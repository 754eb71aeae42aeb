package uploader_test

import (
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// A run that finds batches an earlier run left open says so before it
// settles them, with how many there are, and again when it is done; a
// run that finds none says nothing.
func TestRunTellsItsProgressHowManyOpenBatchesItSettles(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	phase, arrived := 1, 0
	both := make(chan struct{})
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		mu.Lock()
		p := phase
		if p == 1 {
			if arrived++; arrived == 2 {
				close(both)
			}
		}
		mu.Unlock()
		if p == 1 {
			// Both batches are journaled and in flight before either is
			// answered, so the run that stops on the 401 leaves both open.
			select {
			case <-both:
			case <-time.After(10 * time.Second):
				t.Error("the second batch never arrived")
			}
			operation.WriteError(w, http.StatusUnauthorized, operation.CodeUnauthenticated, "token revoked", nil, nil)
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fs")
	c.AddTiles(t, "fs", 4, 256, 4)
	u, _ := newUploader(t, hs.URL, c, nil)

	var events []uploader.SettlingProgress
	req := uploader.Request{FlightID: "fs", BatchSize: 2, Concurrency: 2,
		Settling: func(e uploader.SettlingProgress) { events = append(events, e) }}
	_, err := u.UploadPendingTiles(testCtx(t), req)
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusUnauthorized {
		t.Fatalf("first run: %v, want the 401", err)
	}
	if len(events) != 0 {
		t.Errorf("a run that found no open batches reported settling: %+v", events)
	}
	if n := len(openBatches(t, c, "fs")); n != 2 {
		t.Fatalf("first run left %d open batches, want 2", n)
	}

	mu.Lock()
	phase = 2
	mu.Unlock()
	rep, err := u.UploadPendingTiles(testCtx(t), req)
	if err != nil || rep.Uploaded() != 4 {
		t.Fatalf("second run: %v, report %+v, want all 4 uploaded", err, rep)
	}
	want := []uploader.SettlingProgress{{Open: 2}, {Open: 2, Done: true}}
	if !slices.Equal(events, want) {
		t.Errorf("settling events %+v, want %+v", events, want)
	}
}
