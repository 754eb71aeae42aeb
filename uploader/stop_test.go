package uploader_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// slowJournalStore lets the first batch be journaled at once and holds every
// later one until the provider has answered the first, then until the
// run's context ends (bounded): those batches were not started when the
// run-ending answer came.
type slowJournalStore struct {
	*tilestore.Store
	answered <-chan struct{}
	mu       sync.Mutex
	opened   int
}

func (s *slowJournalStore) ClaimBatch(ctx context.Context, c tilestore.Claim) (tilestore.Claimed, error) {
	s.mu.Lock()
	s.opened++
	first := s.opened == 1
	s.mu.Unlock()
	if !first {
		<-s.answered
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
	}
	return s.Store.ClaimBatch(context.WithoutCancel(ctx), c)
}

// Issue 9 item 8: after a run-ending answer (401/403/404) no batch that had
// not started is sent, even one already formed and journaled by another
// worker.
func TestNoBatchStartsAfterARunEndingAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusUnauthorized, operation.CodeUnauthenticated},
		{http.StatusForbidden, operation.CodeForbidden},
		{http.StatusNotFound, operation.CodeFlightNotFound},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			answered := make(chan struct{})
			var once sync.Once
			f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
				operation.WriteError(w, tc.status, tc.code, "scripted", nil, nil)
				w.(http.Flusher).Flush()
				once.Do(func() { close(answered) })
			})
			c := providertest.NewClient(t, "fs")
			c.AddTiles(t, "fs", 40, 256, 8) // 10 batches of 4
			store := &slowJournalStore{Store: c.Store, answered: answered}
			u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Store = store })
			_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fs", Concurrency: 4})
			var pe *uploader.ProviderError
			if !errors.As(err, &pe) || pe.Status != tc.status {
				t.Fatalf("err = %v, want the %d", err, tc.status)
			}
			if got := len(f.received()); got != 1 {
				t.Errorf("provider got %d batch requests, want 1: no batch starts after the run-ending answer", got)
			}
			if n := c.Counts(t, "fs")[tilestore.StatusUploaded]; n != 0 {
				t.Errorf("%d tiles marked uploaded after the run-ending answer", n)
			}
		})
	}
}
