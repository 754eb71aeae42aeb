package tilestore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

func TestRunsListsEachFlightsLastRunsNewestFirstWithHowManyThereAre(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	t0 := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	for i := range 4 {
		r := tilestore.UploadRun{RunID: fmt.Sprintf("a%d", i), FlightID: "A", Host: "h", PID: 100 + i, StartedAt: t0.Add(time.Duration(i) * time.Minute)}
		if err := s.StartRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.StartRun(ctx, tilestore.UploadRun{RunID: "b0", FlightID: "B", Host: "h", PID: 200, StartedAt: t0}); err != nil {
		t.Fatal(err)
	}
	end, outcome, exit, zero := t0.Add(time.Hour), "success", 0, 0
	if err := s.FinishRun(ctx, tilestore.UploadRun{RunID: "a3", FlightID: "A", FinishedAt: &end, Outcome: &outcome,
		ExitCode: &exit, Accepted: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, tilestore.UploadRun{RunID: "nope", FlightID: "A", FinishedAt: &end}); err == nil {
		t.Error("finishing a run whose start was never recorded succeeded")
	}
	runs, totals, err := s.Runs(ctx, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.RunID)
	}
	if fmt.Sprint(got) != "[a3 a2 b0]" || totals["A"] != 4 || totals["B"] != 1 {
		t.Fatalf("runs %v totals %v, want [a3 a2 b0] with A 4, B 1", got, totals)
	}
	if a3, a2 := runs[0], runs[1]; a3.FinishedAt == nil || *a3.Outcome != "success" || *a3.ExitCode != 0 || *a3.Accepted != 0 ||
		a3.Rejected != nil || a2.FinishedAt != nil || a2.ExitCode != nil || a2.PID != 102 {
		t.Errorf("a3 %+v, a2 %+v: want a3 finished with its counts (unknown ones null), a2 unfinished", a3, a2)
	}
	if only, _, err := s.Runs(ctx, "B", 5); err != nil || len(only) != 1 || only[0].RunID != "b0" {
		t.Errorf("runs of B: %+v (%v)", only, err)
	}
}
