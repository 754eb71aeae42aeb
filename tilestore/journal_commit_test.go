package tilestore_test

import (
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// A claim's commit waits for the disk (its batch is sent only once the
// journal holds its key); a settlement's waits exactly when it records
// rejections (a count may write a durable give-up from them), and one
// that only marks tiles uploaded does not (a lost one is settled again
// from the provider's replay). Whatever the server's default: each
// transaction's BEGIN says its mode. Deferred triggers read the setting
// each commit runs with, through ClaimBatch and SettleBatch themselves.
func TestClaimsAndSettlementsCommitWithTheDurabilityTheirSafetyNeeds(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)
	modes := watchCommits(t, ctx, s.Pool(),
		commitTrigger{"claim", "AFTER INSERT ON upload_batches", ""},
		commitTrigger{"settle", "AFTER UPDATE ON upload_batches", "WHEN (OLD.state IS DISTINCT FROM NEW.state)"})
	claim := func(op, id string) {
		t.Helper()
		c, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "F1", Limit: 4, OpID: op,
			Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
				for _, c := range cands {
					if c.ID == id {
						return tilestore.Batch{OpID: op, TileIDs: []string{c.ID}, SHA256s: []string{c.SHA256}, Fingerprint: "fp-" + op}, nil
					}
				}
				return tilestore.Batch{}, nil
			}})
		if err != nil || len(c.Batch.TileIDs) != 1 {
			t.Fatalf("claim %s of %s = %+v, %v", op, id, c.Batch, err)
		}
	}
	settle := func(st tilestore.Settlement) func() {
		return func() {
			t.Helper()
			if err := s.SettleBatch(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, def := range []string{"on", "off"} {
		modes.serverDefault(def)
		accepted, rejected := "ok-"+def, "rej-"+def
		if mode := modes.of("claim", func() { claim(accepted, ids[2*i]) }); mode != "on" {
			t.Errorf("server default %s: a claim committed with synchronous_commit=%s, want on", def, mode)
		}
		if mode := modes.of("settle", settle(tilestore.Settlement{OpID: accepted, Uploaded: []string{ids[2*i]}, HTTPStatus: 200})); mode != "off" {
			t.Errorf("server default %s: a settlement without rejections committed with synchronous_commit=%s, want off", def, mode)
		}
		claim(rejected, ids[2*i+1])
		st := tilestore.Settlement{OpID: rejected, HTTPStatus: 200,
			Rejections: []tilestore.Rejection{{OpID: rejected, TileID: ids[2*i+1], Reason: "bad_tile", Message: "bad"}}}
		if mode := modes.of("settle", settle(st)); mode != "on" {
			t.Errorf("server default %s: a settlement with rejections committed with synchronous_commit=%s, want on", def, mode)
		}
	}
}
