package retrydecorator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// An inner call that ends with nothing rejected but with tiles it may send
// still pending is partial, not success, so the decorator calls again.
// Here another run claims new tiles and its batch fails while this run's
// first batch is at the provider, so this call never saw them held: they
// are free again but await a lookup, which only the start of a call (or a
// pass after a wait for other runs) makes. The decorator's next call looks
// them up (the provider does not hold them) and sends them.
func TestACallThatLeavesSendableTilesPendingIsPartialSoTheDecoratorCallsAgain(t *testing.T) {
	t.Parallel()
	const fl = "fp"
	c := providertest.NewClient(t, fl)
	c.AddTiles(t, fl, 4, 256, 13)
	ctx := context.Background()
	other := c.Store.ForRun(tilestore.Run{ID: "run-other", Lease: time.Hour})
	var failOther sync.Once
	p := providertest.Start(t, func(cfg *provider.Config) {
		cfg.BeforeRun = func(string) {
			failOther.Do(func() {
				c.AddTilesFrom(t, fl, 4, 4, 256, 14)
				claimed, err := other.ClaimBatch(ctx, tilestore.Claim{FlightID: fl, Limit: 4, OpID: "op-run-other", Pick: pickAll("op-run-other")})
				if err != nil || len(claimed.Tiles) != 4 {
					t.Errorf("the other run's claim: %+v %v", claimed, err)
					return
				}
				if err := other.FailBatch(ctx, claimed.Batch.OpID, 422, "IDEMPOTENCY_EXPIRED"); err != nil {
					t.Errorf("fail the other run's batch: %v", err)
				}
			})
		}
	})
	inner := &countingInner{TileUploader: httpInner(t, c, p.URL)}
	u := New(inner, c.Store, &memRecorder{}, zerolog.Nop(), &fakeClock{now: t0}, defaultConfig(), Hooks{})

	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl, Concurrency: 1})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := c.Counts(t, fl)[tilestore.StatusUploaded]; n != 8 || rep.Pending != 0 {
		t.Fatalf("%d of 8 tiles uploaded, report %+v; want all, none pending", n, rep)
	}
	if len(inner.outcomes) < 2 || inner.outcomes[0] != uploader.OutcomePartial {
		t.Errorf("inner outcomes %v; want the first call partial (it left the other run's tiles pending) and another call",
			inner.outcomes)
	}
	if rep.Outcome != uploader.OutcomeSuccess {
		t.Errorf("run outcome %s, want success", rep.Outcome)
	}
}

// countingInner records the outcome of every inner call.
type countingInner struct {
	uploader.TileUploader
	mu       sync.Mutex
	outcomes []uploader.Outcome
}

func (c *countingInner) UploadPendingTiles(ctx context.Context, req uploader.Request) (uploader.Report, error) {
	rep, err := c.TileUploader.UploadPendingTiles(ctx, req)
	c.mu.Lock()
	c.outcomes = append(c.outcomes, rep.Outcome)
	c.mu.Unlock()
	return rep, err
}
