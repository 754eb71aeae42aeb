package uploader_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// firstSettleHeldStore holds the call's first settlement until the run's
// context ends: the batch it settles keeps its slot of the limit on
// batches in flight until after the run's deadline, and is settled then.
type firstSettleHeldStore struct {
	*tilestore.Store
	runCtx  context.Context
	settled atomic.Bool
}

func (s *firstSettleHeldStore) SettleBatch(ctx context.Context, st tilestore.Settlement) error {
	if s.settled.CompareAndSwap(false, true) {
		<-s.runCtx.Done()
	}
	return s.Store.SettleBatch(ctx, st)
}

// A batch whose advised time has come but whose run's deadline comes
// while it waits for a slot of the limit on batches in flight stays open,
// and the report lists it as waiting, until its journaled not-before: the
// run ends for it (Blocked, NextRetryAt) rather than retrying past its
// deadline, and says which batch waits and since when it may go.
//
// Both batches are advised to come back in 100 ms; with Concurrency 1,
// the first back takes the slot and keeps it (its settlement is held)
// until after the deadline, so the other never goes again in the run.
func TestADueBatchLeftWaitingForASlotAtTheDeadlineIsListedAsWaiting(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if b.Attempt == 1 {
			writeExtensionAlone(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: 100 * time.Millisecond, Strategy: operation.StrategyFixed})
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fd")
	c.AddTiles(t, "fd", 2, 256, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	st := &firstSettleHeldStore{Store: c.Store, runCtx: ctx}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep
		o.Store = st
	})

	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fd", BatchSize: 1, Concurrency: 1})
	if err != nil {
		t.Fatalf("report %+v, %v: want no error (one batch settled, the other left open)", rep, err)
	}
	sends := map[string]int{}
	for _, b := range f.received() {
		sends[b.Key]++
	}
	open, err := c.Store.OpenBatches(testCtx(t), "fd")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].NotBefore == nil || sends[open[0].OpID] != 1 || len(sends) != 2 {
		t.Fatalf("open batches %+v, sends by key %v: want the batch that never got its slot open, sent once, with its not-before", open, sends)
	}
	left := open[0]
	if rep.Pending != 1 || rep.Uploaded() != 1 {
		t.Fatalf("report %+v: want 1 tile uploaded and the waiting batch's 1 pending", rep)
	}
	if len(rep.Waiting) != 1 {
		t.Fatalf("Waiting = %+v, want the batch %s left waiting for its slot at the deadline", rep.Waiting, left.OpID)
	}
	if w := rep.Waiting[0]; w.OpID != left.OpID || w.Tiles != 1 || !w.Until.Equal(*left.NotBefore) || !w.PastDeadline {
		t.Errorf("Waiting[0] = %+v, want batch %s, 1 tile, until its not-before %v, past the deadline", w, left.OpID, *left.NotBefore)
	}
	if rep.NextRetryAt == nil || !rep.NextRetryAt.Equal(*left.NotBefore) {
		t.Errorf("NextRetryAt = %v, want the waiting batch's not-before %v: all the work left waits", rep.NextRetryAt, *left.NotBefore)
	}
}

// A batch whose advised time came, that got its slot, but that the run's
// deadline ended before its resend went on the wire (here in the circuit
// breaker's cool-down, which its own 503 opened) was not sent again
// either: it stays open, listed as waiting until its not-before, and the
// run ends blocked (NextRetryAt) rather than as if the deadline had cut
// work on the wire.
func TestADueBatchTheDeadlineEndsBeforeItsResendGoesIsListedAsWaiting(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if b.Attempt == 1 {
			writeExtensionAlone(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "come back soon",
				&operation.RetryExtension{Allowed: true, After: 100 * time.Millisecond, Strategy: operation.StrategyFixed})
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fk")
	c.AddTiles(t, "fk", 1, 256, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep
		o.Breaker = uploader.BreakerOptions{FailureThreshold: 1, Cooldown: 10 * time.Second}
	})

	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fk", BatchSize: 1, Concurrency: 1})
	if err != nil {
		t.Fatalf("report %+v, %v: want no error (the one batch waits)", rep, err)
	}
	if got := f.received(); len(got) != 1 {
		t.Fatalf("%d batch requests, want 1: the breaker's cool-down outlasts the run", len(got))
	}
	open, err := c.Store.OpenBatches(testCtx(t), "fk")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].NotBefore == nil {
		t.Fatalf("open batches %+v: want the batch open with its not-before", open)
	}
	left := open[0]
	if len(rep.Waiting) != 1 {
		t.Fatalf("Waiting = %+v, Pending %d: want the batch %s, due but not resent by the deadline", rep.Waiting, rep.Pending, left.OpID)
	}
	if w := rep.Waiting[0]; w.OpID != left.OpID || w.Tiles != 1 || !w.Until.Equal(*left.NotBefore) || !w.PastDeadline {
		t.Errorf("Waiting[0] = %+v, want batch %s, 1 tile, until its not-before %v, past the deadline", w, left.OpID, *left.NotBefore)
	}
	if rep.NextRetryAt == nil || !rep.NextRetryAt.Equal(*left.NotBefore) {
		t.Errorf("NextRetryAt = %v, want the waiting batch's not-before %v: all the work left waits", rep.NextRetryAt, *left.NotBefore)
	}
}

// A due batch whose resend the run's deadline cuts on the wire was sent:
// its outcome is unknown, not waiting for the provider's advised time. It
// stays open for the next run, unlisted, and the run does not end blocked
// (no NextRetryAt): the deadline cut work in flight.
func TestADueBatchWhoseResendTheDeadlineCutsOnTheWireIsNotListedAsWaiting(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		if b.Attempt == 1 {
			writeExtensionAlone(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: 100 * time.Millisecond, Strategy: operation.StrategyFixed})
			return
		}
		select { // no answer before the client's deadline ends the request
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	c := providertest.NewClient(t, "fw")
	c.AddTiles(t, "fw", 1, 256, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = operation.Sleep })

	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fw", BatchSize: 1, Concurrency: 1})
	if err != nil {
		t.Fatalf("report %+v, %v: want no error (the batch stays open)", rep, err)
	}
	if got := f.received(); len(got) != 2 {
		t.Fatalf("%d batch requests, want 2: the send and the resend the deadline cut", len(got))
	}
	open, err := c.Store.OpenBatches(testCtx(t), "fw")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || rep.Pending != 1 {
		t.Fatalf("open batches %+v, report %+v: want the batch left open, its tile pending", open, rep)
	}
	if len(rep.Waiting) != 0 || rep.NextRetryAt != nil {
		t.Errorf("Waiting = %+v, NextRetryAt = %v: want none, the resend went and its outcome is unknown", rep.Waiting, rep.NextRetryAt)
	}
}
