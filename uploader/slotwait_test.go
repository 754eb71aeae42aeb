package uploader_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
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
// held, if not nil, is closed as the hold begins.
type firstSettleHeldStore struct {
	*tilestore.Store
	runCtx  context.Context
	settled atomic.Bool
	held    chan struct{}
}

func (s *firstSettleHeldStore) SettleBatch(ctx context.Context, st tilestore.Settlement) error {
	if s.settled.CompareAndSwap(false, true) {
		if s.held != nil {
			close(s.held)
		}
		<-s.runCtx.Done()
	}
	return s.Store.SettleBatch(ctx, st)
}

// advisedOnce answers each batch's first attempt with status and code,
// advising a fixed wait of 100 ms (the retry extension alone), and
// accepts every later one.
func advisedOnce(status int, code string) func(http.ResponseWriter, *http.Request, fakeBatch) {
	return func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if b.Attempt == 1 {
			writeExtensionAlone(w, status, code, "come back soon",
				&operation.RetryExtension{Allowed: true, After: 100 * time.Millisecond, Strategy: operation.StrategyFixed})
			return
		}
		answerAll(w, b, "accepted")
	}
}

// leftWaitingAtDeadline checks that the flight's one open batch, left
// with its not-before, is the report's one waiting batch, listed past the
// deadline until that not-before, and that the run ended blocked until
// then (NextRetryAt). It returns the batch.
func leftWaitingAtDeadline(t *testing.T, c *providertest.Client, flight string, rep uploader.Report) tilestore.Batch {
	t.Helper()
	open, err := c.Store.OpenBatches(testCtx(t), flight)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].NotBefore == nil {
		t.Fatalf("open batches %+v: want one batch open with its not-before", open)
	}
	left := open[0]
	if len(rep.Waiting) != 1 {
		t.Fatalf("Waiting = %+v, Pending %d: want the batch %s, left waiting at the deadline", rep.Waiting, rep.Pending, left.OpID)
	}
	if w := rep.Waiting[0]; w.OpID != left.OpID || w.Tiles != len(left.TileIDs) || !w.Until.Equal(*left.NotBefore) || !w.PastDeadline {
		t.Errorf("Waiting[0] = %+v, want batch %s, %d tile(s), until its not-before %v, past the deadline", w, left.OpID, len(left.TileIDs), *left.NotBefore)
	}
	if rep.NextRetryAt == nil || !rep.NextRetryAt.Equal(*left.NotBefore) {
		t.Errorf("NextRetryAt = %v, want the waiting batch's not-before %v: all the work left waits", rep.NextRetryAt, *left.NotBefore)
	}
	return left
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
	f, hs := newFake(t, advisedOnce(http.StatusConflict, operation.CodeIdempotencyProcessing))
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
	if rep.Pending != 1 || rep.Uploaded() != 1 {
		t.Fatalf("report %+v: want 1 tile uploaded and the waiting batch's 1 pending", rep)
	}
	left := leftWaitingAtDeadline(t, c, "fd", rep)
	sends := map[string]int{}
	for _, b := range f.received() {
		sends[b.Key]++
	}
	if sends[left.OpID] != 1 || len(sends) != 2 {
		t.Fatalf("sends by key %v: want the batch that never got its slot sent once", sends)
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
	f, hs := newFake(t, advisedOnce(http.StatusServiceUnavailable, operation.CodeUnavailable))
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
	leftWaitingAtDeadline(t, c, "fk", rep)
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

// secondClaimSlowStore is firstSettleHeldStore whose second claim takes
// claimDelay: the first batch comes due meanwhile and waits for the
// worker's slot, which it gets, ahead of the worker's next claim, once
// the second batch has gone.
type secondClaimSlowStore struct {
	*firstSettleHeldStore
	claims atomic.Int32
}

const claimDelay = 150 * time.Millisecond

func (s *secondClaimSlowStore) ClaimBatch(ctx context.Context, c tilestore.Claim) (tilestore.Claimed, error) {
	if s.claims.Add(1) == 2 {
		if err := operation.Sleep(ctx, claimDelay); err != nil {
			return tilestore.Claimed{}, err
		}
	}
	return s.Store.ClaimBatch(ctx, c)
}

// A worker whose next claim waits for a slot that due batches, ahead of
// it, keep until the deadline had nothing left to send when every tile
// still pending is in a batch listed as waiting: the run ends blocked
// (no error, NextRetryAt), not cut by its deadline. When tiles nobody
// claimed are left, the deadline cut work that could have gone: the run
// ends with its deadline's error, and no NextRetryAt.
//
// Each batch is advised to come back in 100 ms; the first comes due while
// the worker's second claim takes 150 ms, takes the slot as the second
// batch waits apart, and keeps it (its settlement is held) until after
// the deadline: the worker never claims again, the second batch never
// goes again.
func TestAWorkerStarvedOfItsSlotByDueBatchesAtTheDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		tiles   int
		blocked bool
	}{
		{"every pending tile waits: blocked", 2, true},
		{"a tile nobody claimed is left: cut by the deadline", 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flight := fmt.Sprintf("fs%d", tc.tiles)
			c, rep, err := runStarved(t, flight, tc.tiles, "")
			open, oerr := c.Store.OpenBatches(testCtx(t), flight)
			if oerr != nil {
				t.Fatal(oerr)
			}
			if len(open) != 1 || open[0].NotBefore == nil || len(rep.Waiting) != 1 || rep.Waiting[0].OpID != open[0].OpID {
				t.Fatalf("open batches %+v, Waiting %+v: want the second batch open and listed as waiting", open, rep.Waiting)
			}
			if rep.Uploaded() != 1 || rep.Pending != tc.tiles-1 {
				t.Fatalf("report %+v: want 1 tile uploaded and %d pending", rep, tc.tiles-1)
			}
			if !tc.blocked {
				if !errors.Is(err, context.DeadlineExceeded) || rep.NextRetryAt != nil {
					t.Errorf("error %v, NextRetryAt %v: want the deadline's error and none: a tile nobody claimed is left", err, rep.NextRetryAt)
				}
				return
			}
			if err != nil {
				t.Fatalf("report %+v, %v: want no error, all the work left waits", rep, err)
			}
			if rep.NextRetryAt == nil || !rep.NextRetryAt.Equal(*open[0].NotBefore) {
				t.Errorf("NextRetryAt = %v, want the waiting batch's not-before %v", rep.NextRetryAt, *open[0].NotBefore)
			}
		})
	}
}

// A run cancelled (Ctrl-C) while a due batch waits for its slot, before
// the deadline, leaves the batch open as it leaves the rest of its work:
// not listed as waiting past the deadline, and no NextRetryAt (nothing
// blocks it; the run was stopped).
//
// Both batches are advised to come back in 100 ms; with Concurrency 1,
// the first back takes the slot and keeps it (its settlement is held)
// until the run is cancelled, once the other waits for that slot.
func TestACancelledRunListsNoDueBatchWaitingForItsSlot(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, advisedOnce(http.StatusConflict, operation.CodeIdempotencyProcessing))
	c := providertest.NewClient(t, "fc")
	c.AddTiles(t, "fc", 2, 256, 12)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	st := &firstSettleHeldStore{Store: c.Store, runCtx: ctx, held: make(chan struct{})}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep
		o.Store = st
	})
	slotWaits := uploader.WatchFirstWaits(u)
	go func() {
		defer cancel()
		select {
		case <-st.held:
		case <-time.After(10 * time.Second):
			t.Error("no batch was settled within 10s")
			return
		}
		// The other batch's time comes: it waits for the slot.
		for limit := time.Now().Add(10 * time.Second); slotWaits() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(limit) {
				t.Error("the other batch did not wait for the slot within 10s")
				return
			}
		}
	}()

	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fc", BatchSize: 1, Concurrency: 1})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("report %+v, %v: want the cancellation or no error", rep, err)
	}
	open, oerr := c.Store.OpenBatches(testCtx(t), "fc")
	if oerr != nil {
		t.Fatal(oerr)
	}
	if len(open) != 1 || rep.Uploaded() != 1 || rep.Pending != 1 {
		t.Fatalf("open batches %+v, report %+v: want one batch settled and the other left open", open, rep)
	}
	if len(rep.Waiting) != 0 || rep.NextRetryAt != nil {
		t.Errorf("Waiting = %+v, NextRetryAt = %v: want none, the run was cancelled before its deadline", rep.Waiting, rep.NextRetryAt)
	}
}

// endFailStore is secondClaimSlowStore whose end-of-run step named by
// fail (releasing the leases, making the journal durable, counting the
// pending tiles) fails, once the run's context has ended.
type endFailStore struct {
	*secondClaimSlowStore
	fail string
}

var errEndStep = errors.New("the end-of-run step failed")

func (s *endFailStore) ReleaseLeases(ctx context.Context) error {
	if s.fail == "ReleaseLeases" {
		return errEndStep
	}
	return s.Store.ReleaseLeases(ctx)
}

func (s *endFailStore) SyncJournal(ctx context.Context, flightID string) error {
	if s.fail == "SyncJournal" {
		return errEndStep
	}
	return s.Store.SyncJournal(ctx, flightID)
}

func (s *endFailStore) PendingSummary(ctx context.Context, flightID string) (int, int64, error) {
	if s.fail == "PendingSummary" && s.runCtx.Err() != nil {
		return 0, 0, errEndStep
	}
	return s.Store.PendingSummary(ctx, flightID)
}

// runStarved runs TestAWorkerStarvedOfItsSlotByDueBatchesAtTheDeadline's
// rig on a new flight of tiles, with a 1.5 s deadline: each batch advised
// once to come back in 100 ms, the call's first settlement held until the
// deadline, the worker's second claim slow (claimDelay), and the end-of-run
// step named by fail failing ("": none). It checks that the worker claimed
// twice, its third claim waiting for its slot until the deadline.
func runStarved(t *testing.T, flight string, tiles int, fail string) (*providertest.Client, uploader.Report, error) {
	t.Helper()
	_, hs := newFake(t, advisedOnce(http.StatusConflict, operation.CodeIdempotencyProcessing))
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, tiles, 256, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	st := &endFailStore{
		secondClaimSlowStore: &secondClaimSlowStore{firstSettleHeldStore: &firstSettleHeldStore{Store: c.Store, runCtx: ctx}},
		fail:                 fail,
	}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep
		o.Store = st
	})
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: flight, BatchSize: 1, Concurrency: 1})
	if got := st.claims.Load(); got != 2 {
		t.Fatalf("%d claims, want 2: the worker's third waits for its slot until the deadline", got)
	}
	return c, rep, err
}

// A run whose deadline ended its sends while all its work waits ends
// blocked only when what it reports is complete: when releasing its
// leases, making its journal durable or counting its pending tiles fails
// as it ends, the run reports that failure, with the deadline's error,
// and no NextRetryAt: a journal not durable or a pending count not known
// is no work that only waits.
//
// The rig is TestAWorkerStarvedOfItsSlotByDueBatchesAtTheDeadline's
// blocked case (runStarved).
func TestARunWhoseEndFailsDoesNotEndBlockedAtTheDeadline(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"ReleaseLeases", "SyncJournal", "PendingSummary"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			_, rep, err := runStarved(t, "fe"+strings.ToLower(step[:4]), 2, step)
			if len(rep.Waiting) != 1 {
				t.Fatalf("Waiting %+v: want the second batch listed as waiting", rep.Waiting)
			}
			if !errors.Is(err, errEndStep) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v: want the failure of %s and the deadline's error", err, step)
			}
			if rep.NextRetryAt != nil || rep.Outcome != uploader.OutcomeFailure {
				t.Errorf("NextRetryAt %v, outcome %s: want none and a failure: the report is not complete", rep.NextRetryAt, rep.Outcome)
			}
		})
	}
}
