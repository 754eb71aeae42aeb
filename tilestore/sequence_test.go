package tilestore_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// claimSeq claims up to limit tiles of the flight bound to the stream.
func claimSeq(t testing.TB, s *tilestore.Store, flight string, stream int64, op string, limit int) (tilestore.Claimed, error) {
	t.Helper()
	return s.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: flight, Limit: limit, Stream: stream, OpID: op, Pick: pickAll(op)})
}

func mustStream(t testing.TB, s *tilestore.Store, clientID string) tilestore.Stream {
	t.Helper()
	st, err := s.SequenceStream(testCtx(t), "http://provider.test", clientID)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// sequencedFlight is run-a's store with n tiles of flight seeded, and
// drone-7's stream.
func sequencedFlight(t testing.TB, flight string, n int) (*tilestore.Store, tilestore.Stream) {
	t.Helper()
	s := newStore(t).ForRun(tilestore.Run{ID: "run-a", Lease: time.Minute})
	seedFlight(t, s, flight, n)
	return s, mustStream(t, s, "drone-7")
}

func settleAll(t testing.TB, s *tilestore.Store, c tilestore.Claimed) {
	t.Helper()
	if err := s.SettleBatch(testCtx(t), tilestore.Settlement{OpID: c.Batch.OpID, Uploaded: c.Batch.TileIDs, HTTPStatus: 200}); err != nil {
		t.Fatal(err)
	}
}

func TestASequencedClaimJournalsTheNextNumberWithItsBatch(t *testing.T) {
	t.Parallel()
	s, st := sequencedFlight(t, "SQ", 4)
	c, err := claimSeq(t, s, "SQ", st.ID, "op-sq-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Batch.ClientID != "drone-7" || c.Batch.ClientSeq != 1 {
		t.Fatalf("claimed batch carries %q/%d, want drone-7/1", c.Batch.ClientID, c.Batch.ClientSeq)
	}
	// What a later run adopts after a crash carries the same number.
	open, err := s.AdoptOpenBatches(testCtx(t), "SQ", nil)
	if err != nil || len(open) != 1 || open[0].ClientID != "drone-7" || open[0].ClientSeq != 1 {
		t.Fatalf("adopted %+v (%v), want the batch with drone-7/1", open, err)
	}
}

func TestASecondBatchOfAStreamIsRefusedWhileOneIsOpenWhicheverRunOrFlight(t *testing.T) {
	t.Parallel()
	base := newStore(t)
	a := base.ForRun(tilestore.Run{ID: "run-a", Lease: time.Minute})
	b := base.ForRun(tilestore.Run{ID: "run-b", Lease: time.Minute})
	seedFlight(t, base, "SA", 4)
	seedFlight(t, base, "SB", 4)
	st := mustStream(t, base, "drone-7")
	if _, err := claimSeq(t, a, "SA", st.ID, "op-a-1", 2); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		s       *tilestore.Store
		flight  string
		wantOwn bool
	}{
		{"the same run, same flight", a, "SA", true},
		{"another run, same flight", b, "SA", false},
		{"another run, another flight", b, "SB", false},
	} {
		c, err := claimSeq(t, tc.s, tc.flight, st.ID, "op-x-"+tc.name, 2)
		var busy *tilestore.SequenceBusyError
		if !errors.As(err, &busy) {
			t.Fatalf("%s: claim = %+v, %v; want a *SequenceBusyError", tc.name, c.Batch, err)
		}
		if busy.OpID != "op-a-1" || busy.Seq != 1 || busy.Own != tc.wantOwn || busy.Expired {
			t.Errorf("%s: busy = %+v, want op-a-1 seq 1 own=%v live", tc.name, busy, tc.wantOwn)
		}
	}
	// An unsequenced claim is not held up by the stream.
	if c, err := b.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: "SB", Limit: 2, OpID: "op-b-plain", Pick: pickAll("op-b-plain")}); err != nil || c.Batch.OpID == "" {
		t.Fatalf("unsequenced claim: %+v, %v", c, err)
	}
}

func TestTwoRunsClaimingOneStreamAtOnceBindContiguousNumbersEachOnce(t *testing.T) {
	t.Parallel()
	base := newStore(t)
	seedFlight(t, base, "SC", 60)
	st := mustStream(t, base, "drone-7")
	var (
		mu    sync.Mutex
		seqs  []uint64
		open  int
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for r := range 2 {
		s := base.ForRun(tilestore.Run{ID: fmt.Sprintf("run-%d", r), Lease: time.Minute})
		wg.Go(func() {
			<-start
			for i := 0; ; i++ {
				c, err := claimSeq(t, s, "SC", st.ID, fmt.Sprintf("op-%d-%d", r, i), 3)
				var busy *tilestore.SequenceBusyError
				if errors.As(err, &busy) {
					continue // the other run's batch is in flight
				}
				if err != nil {
					t.Error(err)
					return
				}
				if c.Candidates == 0 {
					return
				}
				mu.Lock()
				open++
				if open > 1 {
					t.Errorf("two batches of the stream in flight at once (run %d got %d)", r, c.Batch.ClientSeq)
				}
				seqs = append(seqs, c.Batch.ClientSeq)
				mu.Unlock()
				mu.Lock()
				open--
				mu.Unlock()
				settleAll(t, s, c)
			}
		})
	}
	close(start)
	wg.Wait()
	slices.Sort(seqs)
	for i, n := range seqs {
		if n != uint64(i+1) {
			t.Fatalf("bound numbers %v: want 1..%d, each once", seqs, len(seqs))
		}
	}
	if len(seqs) != 20 {
		t.Fatalf("%d batches of 3 for 60 tiles, want 20", len(seqs))
	}
	if got := mustStream(t, base, "drone-7").LastCommitted; got != 20 {
		t.Fatalf("last committed %d, want 20", got)
	}
}

func TestASettledBatchCommitsItsNumberAndAFailedOneLeavesItForTheNext(t *testing.T) {
	t.Parallel()
	s, st := sequencedFlight(t, "SF", 6)
	c1, err := claimSeq(t, s, "SF", st.ID, "op-f-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FailBatch(testCtx(t), c1.Batch.OpID, 413, "too large"); err != nil {
		t.Fatal(err)
	}
	c2, err := claimSeq(t, s, "SF", st.ID, "op-f-2", 2)
	if err != nil || c2.Batch.ClientSeq != 1 {
		t.Fatalf("after a failed batch: claimed number %d (%v), want 1 again", c2.Batch.ClientSeq, err)
	}
	settleAll(t, s, c2)
	if got := mustStream(t, s, "drone-7").LastCommitted; got != 1 {
		t.Fatalf("after a settled batch: last committed %d, want 1", got)
	}
	c3, err := claimSeq(t, s, "SF", st.ID, "op-f-3", 2)
	if err != nil || c3.Batch.ClientSeq != 2 {
		t.Fatalf("after a settled batch: claimed number %d (%v), want 2", c3.Batch.ClientSeq, err)
	}
}

func TestRebindFollowsTheProvidersLastCommittedDurably(t *testing.T) {
	t.Parallel()
	s, st := sequencedFlight(t, "SR", 4)
	if _, err := s.SyncSequence(testCtx(t), st.ID, 9); err != nil {
		t.Fatal(err)
	}
	c, err := claimSeq(t, s, "SR", st.ID, "op-r-1", 2)
	if err != nil || c.Batch.ClientSeq != 10 {
		t.Fatalf("claimed %d (%v), want 10", c.Batch.ClientSeq, err)
	}
	// The provider lost state and answered SEQUENCE_GAP with 4.
	n, err := s.RebindSequence(testCtx(t), "op-r-1", 4)
	if err != nil || n != 5 {
		t.Fatalf("rebind = %d, %v; want 5", n, err)
	}
	open, err := s.OpenBatches(testCtx(t), "SR")
	if err != nil || len(open) != 1 || open[0].OpID != "op-r-1" || open[0].ClientSeq != 5 {
		t.Fatalf("open batches after the rebind: %+v (%v), want op-r-1 bound to 5", open, err)
	}
	if _, err := b(s).RebindSequence(testCtx(t), "op-r-1", 6); !errors.Is(err, tilestore.ErrNotOwner) {
		t.Fatalf("another run rebinding this run's batch: %v, want ErrNotOwner", err)
	}
	settleAll(t, s, c)
	if got := mustStream(t, s, "drone-7").LastCommitted; got != 5 {
		t.Fatalf("last committed %d, want 5", got)
	}
	if _, err := s.RebindSequence(testCtx(t), "op-r-1", 7); !errors.Is(err, tilestore.ErrBatchNotOpen) {
		t.Fatalf("rebinding a settled batch: %v, want ErrBatchNotOpen", err)
	}
}

func b(s *tilestore.Store) *tilestore.Store {
	return s.ForRun(tilestore.Run{ID: "run-b", Lease: time.Minute})
}

func TestSyncRaisesTheNumberOnlyWhileNoBatchIsOpenAndNeverLowersIt(t *testing.T) {
	t.Parallel()
	s, st := sequencedFlight(t, "SS", 4)
	sync := func(n uint64, wantChanged bool, wantLast uint64) {
		t.Helper()
		changed, err := s.SyncSequence(testCtx(t), st.ID, n)
		if err != nil || changed != wantChanged {
			t.Fatalf("sync %d: changed %v (%v), want %v", n, changed, err, wantChanged)
		}
		if got := mustStream(t, s, "drone-7").LastCommitted; got != wantLast {
			t.Fatalf("sync %d: last committed %d, want %d", n, got, wantLast)
		}
	}
	sync(3, true, 3)
	sync(1, false, 3)
	c, err := claimSeq(t, s, "SS", st.ID, "op-s-1", 2)
	if err != nil || c.Batch.ClientSeq != 4 {
		t.Fatalf("claimed %d (%v), want 4", c.Batch.ClientSeq, err)
	}
	sync(10, false, 3) // the open batch is settled first
	// ALREADY_COMMITTED: the number counts as committed, the batch fails
	// and its tiles await a lookup.
	if err := s.FailCommittedBatch(testCtx(t), "op-s-1", 409, "ALREADY_COMMITTED"); err != nil {
		t.Fatal(err)
	}
	if got := mustStream(t, s, "drone-7").LastCommitted; got != 4 {
		t.Fatalf("after a committed batch failed: last committed %d, want 4", got)
	}
	amb, _, err := s.AmbiguousPending(testCtx(t), "SS")
	if err != nil || len(amb) != 2 {
		t.Fatalf("tiles awaiting a lookup: %d (%v), want the batch's 2", len(amb), err)
	}
	sync(10, true, 10)
}
