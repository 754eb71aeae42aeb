package optable_test

import (
	"context"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/optable"
	"github.com/tilectl/tilectl/provider/optable/optabletest"
)

// TestDefaultTableAdmitsIDsFromSkewedClocks: by default an ID's embedded
// time is not trusted, so a client whose clock is years behind can still
// upload; UUIDv7IssuedAt opts in to recognising old IDs.
func TestDefaultTableAdmitsIDsFromSkewedClocks(t *testing.T) {
	ctx := context.Background()
	old := optabletest.UUIDv7At(time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC))
	r := optable.Request{OpID: old, Method: "m", Fingerprint: "f"}

	def := optable.NewTable(optable.NewMemoryStore(), optable.TableOptions{})
	if tk, err := def.Begin(ctx, r); err != nil || !tk.Owner() {
		t.Fatalf("default table: %v, want owner", err)
	}
	strict := optable.NewTable(optable.NewMemoryStore(), optable.TableOptions{IssuedAt: optable.UUIDv7IssuedAt})
	if _, err := strict.Begin(ctx, r); err != optable.ErrExpired {
		t.Fatalf("UUIDv7IssuedAt table: %v, want ErrExpired", err)
	}
	if at, ok := optable.UUIDv7IssuedAt(operation.NewID()); !ok || time.Since(at) > time.Minute {
		t.Fatalf("NewID time %v %v", at, ok)
	}
	if _, ok := optable.UUIDv7IssuedAt("not-a-uuid-at-all"); ok {
		t.Fatal("a non-UUID was recognised")
	}
}

// TestCollectEveryRunsGCOnEachTick: retry.gc.ttl, driven by a ticker.
func TestCollectEveryRunsGCOnEachTick(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clock := optabletest.NewClock()
	table := optable.NewTable(optable.NewMemoryStore(), optable.TableOptions{Retention: time.Hour, GCMargin: time.Hour, Now: clock.Now})
	tk, err := table.Begin(ctx, optable.Request{OpID: "op-collect-00001", Method: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Seal(ctx, optable.Outcome{Status: 200}); err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	counts := make(chan int)
	done := make(chan struct{})
	go func() {
		table.CollectEvery(ctx, tick, func(n int, err error) {
			if err != nil {
				t.Error(err)
			}
			counts <- n
		})
		close(done)
	}()
	tick <- time.Time{}
	if n := <-counts; n != 0 {
		t.Fatalf("collected %d records inside the window", n)
	}
	clock.Advance(2*time.Hour + time.Second)
	tick <- time.Time{}
	if n := <-counts; n != 1 {
		t.Fatalf("collected %d records past retention+margin, want 1", n)
	}
	cancel()
	<-done
}

// commitsThenReportsCancel is a Store whose Admit lands and then reports
// the caller's cancellation, as pgx does when a context ends while the
// INSERT's commit is on its way back.
type commitsThenReportsCancel struct{ optable.Store }

func (s commitsThenReportsCancel) Admit(ctx context.Context, a optable.Admission) (optable.Record, bool, error) {
	rec, owner, err := s.Store.Admit(context.WithoutCancel(ctx), a)
	if ctx.Err() != nil {
		return optable.Record{}, false, ctx.Err()
	}
	return rec, owner, err
}

// Found by the chaos soak (seed 3912842808208168489, round 192): a client
// that went away while its batch was being admitted left a live record
// nobody owned in a process that lived on, and every look at the key said
// live (every resend 409 IDEMPOTENCY_PROCESSING) until the provider
// restarted. An admission is not undone by a dropped client: Begin hands
// the record to the caller as its owner, who runs and seals it.
func TestAnAdmissionAClientLeftDuringIsOwnedNotOrphaned(t *testing.T) {
	pool := newPGPool(t)
	table := optable.NewTable(commitsThenReportsCancel{optable.NewPGStore(pool)}, optable.TableOptions{})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	tk, err := table.Begin(gone, optable.Request{OpID: "op-client-gone-01", Method: "m", Policy: batchPolicy})
	if err != nil || !tk.Owner() {
		st, _, _ := table.Lookup(context.Background(), optable.Key{OpID: "op-client-gone-01"})
		t.Fatalf("Begin after the client left: %v, owner %v, record %s; want the caller to own the admitted record", err, err == nil && tk.Owner(), st)
	}
	if _, err := tk.Seal(context.Background(), optable.Outcome{Status: 200}); err != nil {
		t.Fatal(err)
	}
}
