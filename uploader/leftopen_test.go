package uploader_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// A batch the run leaves open on purpose (here: its 2xx cannot be read after
// every resend) is not adopted and sent again by a later pass of the same
// call, after the run waited for another run's batch: the next run settles
// it.
func TestABatchLeftOpenIsNotResentByALaterPassOfTheSameRun(t *testing.T) {
	t.Parallel()
	const resends = 1
	c := providertest.NewClient(t, "fl")
	c.AddTiles(t, "fl", 12, 512, 64)
	// Another run, on another host, holds the first 4 tiles until its
	// lease ends: this run waits for it, then adopts the batch in a later
	// pass.
	other := c.Store.ForRun(tilestore.Run{ID: "other-run", Host: "elsewhere", PID: 7, Lease: 2 * time.Second})
	held := operation.NewID()
	if _, err := other.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: "fl", Limit: 4, OpID: held,
		Pick: pickAsUploader(held, "fl")}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	garbled := ""
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		mu.Lock()
		if garbled == "" && b.Key != held {
			garbled = b.Key
		}
		bad := b.Key == garbled
		mu.Unlock()
		if bad {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"op_id":`)) // cut off, every time
			return
		}
		answerAll(w, b, "accepted")
	})
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep, o.MaxResends = nil, resends })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fl", Concurrency: 1})
	if err != nil {
		t.Fatalf("UploadPendingTiles: %v", err)
	}
	attempts := map[string]int{}
	for _, b := range f.received() {
		attempts[b.Key]++
	}
	if attempts[held] != 1 {
		t.Fatalf("the other run's batch went %d times, want once, adopted after its lease ended (report %+v)", attempts[held], rep)
	}
	if attempts[garbled] != resends+1 {
		t.Fatalf("the batch left open went %d times, want %d: a later pass of the same run sent it again", attempts[garbled], resends+1)
	}
	if rep.Accepted != 8 || rep.Pending != 4 {
		t.Fatalf("report %+v; want 8 accepted and the left-open batch's 4 pending", rep)
	}
}

// When the last other run holding some of the flight ends and leaves tiles
// pending (here: its batch failed), the waiting run does one more pass and
// sends them, instead of ending with them pending.
func TestARunSendsWhatTheLastHolderLeftPending(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "fe")
	c.AddTiles(t, "fe", 12, 512, 65)
	other := c.Store.ForRun(tilestore.Run{ID: "other-run", Host: "elsewhere", PID: 8, Lease: time.Minute})
	held := operation.NewID()
	if _, err := other.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: "fe", Limit: 4, OpID: held,
		Pick: pickAsUploader(held, "fe")}); err != nil {
		t.Fatal(err)
	}
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = nil })
	var once sync.Once
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fe", Concurrency: 1,
		Holding: func(h uploader.Held) {
			if h.Tiles == 0 {
				return
			}
			// The holder's batch fails while this run waits for it: its
			// tiles are pending again, and nobody holds anything.
			once.Do(func() {
				if err := other.FailBatch(testCtx(t), held, 422, "the holder's key could not be used"); err != nil {
					t.Errorf("fail the holder's batch: %v", err)
				}
			})
		}})
	if err != nil {
		t.Fatalf("UploadPendingTiles: %v", err)
	}
	if rep.Pending != 0 || rep.Accepted != 12 {
		t.Fatalf("report %+v; want all 12 accepted: the tiles the holder left pending are this run's to send", rep)
	}
}

// brokenLiveness cannot tell whether any run is alive: a lock file of
// another user's, a filesystem without flock.
type brokenLiveness struct{}

func (brokenLiveness) State(string) (tilestore.RunState, error) {
	return tilestore.RunUnknown, errors.New("open run lock: permission denied")
}

// A liveness check that fails does not end the run: the holder's lease
// decides, as for a run on another machine.
func TestALivenessCheckThatFailsLeavesTheLeaseToDecide(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "fv")
	c.AddTiles(t, "fv", 8, 512, 66)
	other := c.Store.ForRun(tilestore.Run{ID: "other-run", Host: c.Store.Run().Host, PID: 9, Lease: time.Second})
	held := operation.NewID()
	if _, err := other.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: "fv", Limit: 4, OpID: held,
		Pick: pickAsUploader(held, "fv")}); err != nil {
		t.Fatal(err)
	}
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep, o.Liveness = nil, brokenLiveness{} })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fv", Concurrency: 1})
	if err != nil {
		t.Fatalf("UploadPendingTiles: %v; a liveness check that fails must not end the run", err)
	}
	if rep.Pending != 0 || rep.Accepted != 8 {
		t.Fatalf("report %+v; want all 8 accepted, the holder's batch adopted when its lease ended", rep)
	}
}

// releaseWatch is a Store that notes lease renewals made after the run
// released its leases; its release takes a while, as over a slow link.
type releaseWatch struct {
	uploader.Store
	released, late atomic.Int32
}

func (s *releaseWatch) ReleaseLeases(ctx context.Context) error {
	err := s.Store.ReleaseLeases(ctx)
	s.released.Store(1)
	time.Sleep(100 * time.Millisecond) // the window a renewal could land in
	return err
}

func (s *releaseWatch) ExtendLeases(ctx context.Context) (int, error) {
	if s.released.Load() == 1 {
		s.late.Add(1)
	}
	return s.Store.ExtendLeases(ctx)
}

// A run stops renewing its leases before it releases them: a renewal after
// the release would hold its open batches from other runs again.
func TestARunRenewsNoLeaseAfterReleasingThem(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "fx")
	c.AddTiles(t, "fx", 4, 512, 67)
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	// A lease short enough that renewals (every third of it) fall in the
	// window ReleaseLeases holds open, long enough that a loaded machine
	// does not lose it mid-run.
	store := &releaseWatch{Store: c.Store.ForRun(tilestore.Run{Lease: 150 * time.Millisecond})}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Store = store })
	if _, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fx"}); err != nil {
		t.Fatal(err)
	}
	if n := store.late.Load(); n > 0 {
		t.Fatalf("%d lease renewal(s) after the run released its leases", n)
	}
}

// Another live run's batch that the provider told to wait past this run's
// deadline is not waited for: the run ends at once, reporting the held
// tiles and when they may go on (exit 3), instead of waiting out its
// deadline for work that cannot move before it.
func TestARunDoesNotWaitForAnotherRunsBatchParkedPastItsDeadline(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "fw7")
	c.AddTiles(t, "fw7", 8, 512, 68)
	other := c.Store.ForRun(tilestore.Run{ID: "other-run", Host: "elsewhere", PID: 10, Lease: 30 * time.Second})
	held := operation.NewID()
	if _, err := other.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: "fw7", Limit: 4, OpID: held,
		Pick: pickAsUploader(held, "fw7")}); err != nil {
		t.Fatal(err)
	}
	nb, err := other.DeferBatch(testCtx(t), held, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fw7"})
	if err != nil {
		t.Fatalf("UploadPendingTiles: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the run waited out its deadline for a batch that waits past it")
	}
	if rep.Accepted != 4 || rep.Held == nil || rep.Held.Tiles != 4 {
		t.Fatalf("report %+v, held %+v; want its 4 tiles accepted and the other run's 4 reported held", rep, rep.Held)
	}
	if until, stop := rep.Blocked(); !stop || !until.Equal(nb) || rep.NextRetryAt == nil || !rep.NextRetryAt.Equal(nb) {
		t.Fatalf("blocked until %v (stop %v), next_retry_at %v; want the held batch's not-before %v", until, stop, rep.NextRetryAt, nb)
	}
}
