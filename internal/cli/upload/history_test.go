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
		o.FlightID, o.MaxInCallRetries, o.MaxPerTileAttempts, o.RunID = "F1", 0, 1, "run-partial"
	}, "max-in-call-retries", "max-per-tile-attempts"); res.code != exitcode.Partial {
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
