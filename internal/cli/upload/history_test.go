package upload

import (
	"context"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
)

func TestRunHistoryRecordsTheEndOfAPartialRunAndOfAFailedRun(t *testing.T) {
	r := newCmdRig(t, "F1-t002")
	r.seed("F1", tilestore.FlightOnGround, 3)
	r.seed("F2", tilestore.FlightAirborne, 1)
	if res := r.run(func(o *Options) {
		o.FlightID, o.RunID = "F1", "run-partial"
	}, "--max-in-call-retries", "0", "--max-per-tile-attempts", "1"); res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3", res.code, res.err)
	}
	if res := r.run(func(o *Options) { o.FlightID, o.RunID = "F2", "run-airborne" }); res.code != exitcode.NotOnGround {
		t.Fatalf("exit %d (%v), want 4", res.code, res.err)
	}
	runs, totals, err := r.store.Runs(context.Background(), "", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || totals["F1"] != 1 || totals["F2"] != 1 {
		t.Fatalf("runs %+v totals %v, want one per flight", runs, totals)
	}
	f1, f2 := runs[0], runs[1] // ordered by flight
	if f1.RunID != "run-partial" || f1.FinishedAt == nil || *f1.Outcome != "partial" || *f1.ExitCode != 3 ||
		*f1.GivenUp != 1 || *f1.Accepted != 2 || *f1.Pending != 0 || *f1.Bytes == 0 || f1.Error != nil {
		t.Errorf("partial run's row: %+v", f1)
	}
	if f2.RunID != "run-airborne" || f2.FinishedAt == nil || *f2.Outcome != "failure" || *f2.ExitCode != 4 ||
		f2.Error == nil || !strings.Contains(*f2.Error, "on_ground") {
		t.Errorf("failed run's row: %+v (error %v)", f2, f2.Error)
	}
}

func TestRunHistoryWriteFailureIsAWarningAndTheUploadGoesOn(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 2)
	if _, err := r.store.Pool().Exec(context.Background(), `DROP TABLE upload_runs`); err != nil {
		t.Fatal(err)
	}
	res := r.run(func(o *Options) { o.FlightID = "F1" })
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v), want 0: the history is a record, not the job\n%s", res.code, res.err, res.stderr)
	}
	if !strings.Contains(res.stderr, `"level":"warn"`) || !strings.Contains(res.stderr, "run history: could not record this run's start") {
		t.Errorf("no WARN about the run history:\n%s", res.stderr)
	}
}

func TestRunHistoryRowsOfOneRunShareTheRunIDOfItsBatchClaims(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 2)
	r.seed("F2", tilestore.FlightOnGround, 2)
	if res := r.run(nil); res.code != exitcode.OK { // no --flight: every landed flight
		t.Fatalf("exit %d (%v), want 0", res.code, res.err)
	}
	var rows, ids, unjoined int
	if err := r.store.Pool().QueryRow(context.Background(), `SELECT count(*), count(DISTINCT run_id),
		(SELECT count(*) FROM upload_batches b WHERE b.owner_run IS DISTINCT FROM (SELECT min(run_id) FROM upload_runs))
		FROM upload_runs`).Scan(&rows, &ids, &unjoined); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || ids != 1 || unjoined != 0 {
		t.Errorf("%d history rows under %d run IDs, %d batches owned by another ID; want 2 rows of one run that owns every batch", rows, ids, unjoined)
	}
}
