package providertest

import (
	"context"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// RejectUnsent records tile id's rejection under op as a run records a
// tile it turns away before sending: a claim whose Pick rejects it. Tests
// that need a recorded, uncounted rejection make it this way, through the
// production path.
func RejectUnsent(t testing.TB, ctx context.Context, s *tilestore.Store, flight, op, id, reason, message string) {
	t.Helper()
	c, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: flight, Limit: 1000, OpID: op,
		Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
			for _, c := range cands {
				if c.ID == id {
					return tilestore.Batch{}, []tilestore.Rejection{{OpID: op, TileID: id, Reason: reason, Message: message}}
				}
			}
			return tilestore.Batch{}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rejections) != 1 {
		t.Fatalf("claim %s found no tile %s to reject", op, id)
	}
}
