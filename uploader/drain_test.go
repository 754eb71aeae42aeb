package uploader_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// emptyClaims is a Store that counts the claims that found nothing.
type emptyClaims struct {
	uploader.Store
	empty atomic.Int32
}

func (s *emptyClaims) ClaimBatch(ctx context.Context, c tilestore.Claim) (tilestore.Claimed, error) {
	got, err := s.Store.ClaimBatch(ctx, c)
	if err == nil && got.Candidates == 0 {
		s.empty.Add(1)
	}
	return got, err
}

// A call's workers are as many as its limit has been; once the flight has
// nothing left to claim, they do not each ask the database twice (after
// the cursor, then from the first tile) to learn it: what one claim found
// holds for the others until a batch of the call ends.
func TestTheWorkersOfADrainedCallDoNotEachAskTheDatabaseAgain(t *testing.T) {
	t.Parallel()
	const batches, workers = 4, 32
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fdr")
	c.AddTiles(t, "fdr", 4*batches, 512, 71)
	store := &emptyClaims{Store: c.Store}
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.Store = store })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fdr", BatchSize: 4, Concurrency: workers})
	if err != nil || rep.Accepted != 4*batches {
		t.Fatalf("accepted %d of %d: %v", rep.Accepted, 4*batches, err)
	}
	// Each batch's end may free tiles: after it, a claim after the
	// cursor and one from the first tile find that none are, and the one
	// claim that had begun its transaction while the turn was taken
	// (claims begin before their turn) asks once more.
	if n, most := store.empty.Load(), int32(3*(batches+1)); n > most {
		t.Fatalf("%d claims found nothing, want at most %d (%d workers)", n, most, workers)
	}
}
