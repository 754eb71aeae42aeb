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

// slowClaims is a Store whose claims each take a while (a loaded
// database), and which counts the claims that formed a batch and the
// batches they formed.
type slowClaims struct {
	uploader.Store
	delay time.Duration

	mu              sync.Mutex
	claims, batches int
	sizes           map[int]int // batch size -> batches
}

func (s *slowClaims) ClaimBatch(ctx context.Context, c tilestore.Claim) (tilestore.Claimed, error) {
	time.Sleep(s.delay)
	got, err := s.Store.ClaimBatch(ctx, c)
	if err == nil && got.Batch.OpID != "" {
		s.mu.Lock()
		s.claims++
		for _, f := range append([]tilestore.Formed{{Batch: got.Batch}}, got.More...) {
			s.batches++
			s.sizes[len(f.Batch.TileIDs)]++
		}
		s.mu.Unlock()
	}
	return got, err
}

// Where the claims are what holds the batches back (workers wait for the
// claim turn), one claim forms a batch for each worker waiting too: fewer
// claim transactions than batches, each batch still of the provider's
// size under a key of its own, and every tile stored once.
func TestWorkersWaitingForTheClaimTurnGetTheirBatchesFromOneClaim(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) { c.Limits.MaxBatchTiles = 2 })
	c := providertest.NewClient(t, "fmany")
	c.AddTiles(t, "fmany", 64, 256, 75)
	store := &slowClaims{Store: c.Store, delay: 20 * time.Millisecond, sizes: map[int]int{}}
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.Store = store })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fmany", Concurrency: 8})
	if err != nil || rep.Accepted != 64 {
		t.Fatalf("UploadPendingTiles: accepted %d, err %v; want 64", rep.Accepted, err)
	}
	allUploadedOnce(t, c, p, "fmany", 64)
	if store.batches != 32 || store.sizes[2] != 32 {
		t.Errorf("%d batches of sizes %v, want 32 of the provider's 2 tiles", store.batches, store.sizes)
	}
	if store.claims > store.batches/2 {
		t.Errorf("%d claim transactions formed the %d batches, with 8 workers waiting on slow claims: want at most half as many", store.claims, store.batches)
	}
}
