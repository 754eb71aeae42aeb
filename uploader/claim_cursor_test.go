package uploader_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// A worker claims after the last tile of its previous claim; tiles freed
// behind it during the call (here another run's batch, settled with clear
// rejections while this run's first batch is at the provider) are still
// sent in the same call, by the claim from the first tile a worker makes
// before it stops.
func TestTilesFreedBehindAWorkersClaimCursorAreSentInTheSameCall(t *testing.T) {
	t.Parallel()
	const fl = "fc"
	c := providertest.NewClient(t, fl)
	tiles := c.AddTiles(t, fl, 8, 256, 17)
	ctx := testCtx(t)
	other := c.Store.ForRun(tilestore.Run{ID: "run-other", Lease: time.Hour})
	claimed, err := other.ClaimBatch(ctx, tilestore.Claim{FlightID: fl, Limit: 4, OpID: "op-run-other",
		Pick: pickAll("op-run-other", "fp-run-other")})
	if err != nil || len(claimed.Tiles) != 4 || claimed.Tiles[0].ID != tiles[0].ID {
		t.Fatalf("the other run's claim: %+v %v; want the first 4 tiles", claimed, err)
	}
	var settleOther sync.Once
	p := providertest.Start(t, func(cfg *provider.Config) {
		cfg.BeforeRun = func(string) {
			settleOther.Do(func() {
				st := tilestore.Settlement{OpID: claimed.Batch.OpID, HTTPStatus: 200}
				for _, tl := range claimed.Tiles {
					st.Rejections = append(st.Rejections, tilestore.Rejection{OpID: st.OpID, TileID: tl.ID, Reason: "bad_tile"})
				}
				if err := other.SettleBatch(context.Background(), st); err != nil {
					t.Errorf("settle the other run's batch: %v", err)
				}
			})
		}
	})
	u, _ := newUploader(t, p.URL, c, nil)
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl, BatchSize: 2, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != uploader.OutcomeSuccess || rep.Pending != 0 || rep.Accepted != len(tiles) {
		t.Fatalf("report %+v; want all %d tiles accepted in this call, none pending", rep, len(tiles))
	}
	allUploadedOnce(t, c, p, fl, len(tiles))
}
