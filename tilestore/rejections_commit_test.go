package tilestore_test

import (
	"context"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// A count's commit waits for the disk exactly when it gives a tile up:
// the caller reports a give-up once CountRejectionsUpTo returns, so it
// must be durable by then, whatever the server's default. A count
// without give-ups is re-derived from rejections that were committed
// durably (a crash that loses it leaves them uncounted, attempts
// unchanged), so its commit need not wait. A deferred trigger reads the
// setting the commit runs with.
func TestCountRejectionsCommitWaitsForTheDiskOnlyWhenATileGivesUp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 2)
	modes := watchCommits(t, ctx, s.Pool(),
		commitTrigger{"count", "AFTER UPDATE ON tiles", "WHEN (OLD.upload_attempts IS DISTINCT FROM NEW.upload_attempts)"})
	// commitMode counts with a budget of 2 and returns the mode its commit
	// ran with.
	commitMode := func(wantGiveUps int) string {
		t.Helper()
		return modes.of("count", func() {
			res, err := s.CountRejectionsUpTo(ctx, "F1", 2, 0, "", func(context.Context, []tilestore.GiveUp) error { return nil })
			if err != nil || res.Counted != 1 || len(res.GaveUp) != wantGiveUps {
				t.Fatalf("count = %+v, %v; want 1 counted, %d give-ups", res, err, wantGiveUps)
			}
		})
	}
	for i, def := range []string{"on", "off"} {
		modes.serverDefault(def)
		reject(t, s, "first-"+def, "bad_tile", ids[i])
		if mode := commitMode(0); mode != "off" {
			t.Errorf("server default %s: a count without give-ups committed with synchronous_commit=%s, want off", def, mode)
		}
		reject(t, s, "second-"+def, "bad_tile", ids[i])
		if mode := commitMode(1); mode != "on" {
			t.Errorf("server default %s: a count that gave a tile up committed with synchronous_commit=%s, want on", def, mode)
		}
	}
}
