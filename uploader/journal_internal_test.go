package uploader

import (
	"context"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

// journalOpen journals one open batch of every pending tile of flightID
// (at most limit), as a run does before its first send, and returns it.
func journalOpen(ctx context.Context, t *testing.T, c *providertest.Client, flightID string, limit int) tilestore.Batch {
	t.Helper()
	op := operation.NewID()
	claimed, err := c.Store.ClaimBatch(ctx, tilestore.Claim{FlightID: flightID, Limit: limit, OpID: op,
		Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
			return batchOf(flightID, op, cands), nil
		}})
	if err != nil || claimed.Batch.OpID != op {
		t.Fatalf("journal the batch: %+v, %v", claimed.Batch, err)
	}
	return claimed.Batch
}
