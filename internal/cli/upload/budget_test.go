package upload

import (
	"context"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

// Issue 9 item 6: a run without the retry decorator counts nothing, so a
// tile whose counted and uncounted rejections already reach the budget (a
// crash between the FDR write and the count's commit leaves it so) must not
// be sent by it: the next retrying run gives it up with what it has.
func TestNoRetryDoesNotSendTilesAlreadyAtTheirBudget(t *testing.T) {
	r := newCmdRig(t)
	ids := r.seed("F1", tilestore.FlightOnGround, 3)
	atBudget := ids[0]
	ctx := context.Background()
	budget := r.cfg.Retry.MaxPerTileAttempts
	if _, err := r.store.Pool().Exec(ctx, `UPDATE tiles SET upload_attempts = $2 WHERE tile_id = $1`, atBudget, budget-1); err != nil {
		t.Fatal(err)
	}
	providertest.RejectUnsent(t, ctx, r.store, "F1", "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000", atBudget, "decode_error", "an earlier run's answer, not yet counted")

	res := r.run(func(o *Options) { o.FlightID, o.NoRetry = "F1", true })
	if res.code != exitcode.Partial {
		t.Fatalf("--no-retry run: exit %d (%v), want 3 (a tile still pending)\n%s", res.code, res.err, res.stderr)
	}
	if n := r.prov.Carried()[atBudget]; n != 0 {
		t.Errorf("--no-retry sent tile %s, already at its budget of %d, %d time(s)", atBudget, budget, n)
	}
	if r.prov.Carried()[ids[1]] != 1 || r.status(ids[1]) != "uploaded" {
		t.Errorf("the other tiles were not uploaded")
	}

	res = r.run(func(o *Options) { o.FlightID = "F1" })
	if res.code != exitcode.Partial || r.status(atBudget) != "upload_giveup" || r.prov.Carried()[atBudget] != 0 {
		t.Errorf("retrying run: exit %d, tile %s %s after %d sends; want exit 3, upload_giveup, never sent",
			res.code, atBudget, r.status(atBudget), r.prov.Carried()[atBudget])
	}
}
