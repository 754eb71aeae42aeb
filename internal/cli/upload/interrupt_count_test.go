package upload

import (
	"context"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

// An interrupted run counts as on the wire only its open batches that may
// be sent now: one waiting for the provider's advised time is not.
func TestAnInterruptedRunDoesNotCountBatchesWaitingForAdviceAsOnTheWire(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "fi")
	c.AddTiles(t, "fi", 8, 256, 81)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ops []string
	for range 2 {
		op := operation.NewID()
		_, err := c.Store.ClaimBatch(ctx, tilestore.Claim{FlightID: "fi", Limit: 4, OpID: op,
			Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
				b := tilestore.Batch{OpID: op, FlightID: "fi", Fingerprint: "fp-" + op}
				for _, tl := range cands {
					b.TileIDs, b.SHA256s = append(b.TileIDs, tl.ID), append(b.SHA256s, tl.SHA256)
				}
				return b, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
	}
	if _, err := c.Store.DeferBatch(ctx, ops[0], time.Minute); err != nil {
		t.Fatal(err)
	}
	r := &run{store: c.Store}
	if n := r.ownOpenBatches(ctx, "fi"); n != 1 {
		t.Fatalf("batches on the wire = %d, want 1: the batch waiting for its advised time is not on the wire", n)
	}
}
