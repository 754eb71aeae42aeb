package upload

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pluralAfterOne finds a count of one followed by a plural noun ("1
// given-up tiles", "1 retries") or a "(s)" that leaves the choice to the
// reader.
var pluralAfterOne = regexp.MustCompile(`\b1 (given-up |give-up |open )?(tiles|batches|retries|rejections|records|files|flights|attempts)\b|\(s\)`)

func TestCountsOfOneAreSingularInTheTextSummary(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	one := int64(1)
	oneTile := 1
	held := start.Add(time.Minute)
	flight := func(id string) FlightSummary {
		return FlightSummary{FlightID: id, Outcome: "partial", Started: start, Finished: start.Add(2 * time.Second),
			Counts: Counts{Uploaded: 1, Accepted: 1, Rejected: 1, RejectedTiles: 1, GivenUp: 1, StillPending: &oneTile,
				Retries: 1, Batches: 1, Bytes: 100, LocalFailed: 1},
			GiveUpsAwaitingReview: &one, HeldByOtherRuns: 1, HeldUntil: &held}
	}
	s := &Summary{Outcome: "partial", Flights: []FlightSummary{flight("F1"), flight("F2")}}
	s.Counts = s.Flights[0].Counts
	s.FDR = &FDRSummary{RingTooSmall: true, Records: 1, Bytes: 10, Path: "/x/fdr.ring", CapacityBytes: 5, SuggestedCapacityBytes: &one}
	var out bytes.Buffer
	if err := s.writeText(&out); err != nil {
		t.Fatal(err)
	}
	dry := &Summary{DryRun: true, Flights: []FlightSummary{{FlightID: "F3", Counts: Counts{StillPending: &oneTile, Batches: 1, LocalFailed: 1}}}}
	if err := dry.writeText(&out); err != nil {
		t.Fatal(err)
	}
	dry.Flights[0].LocalFailed = 0
	if err := dry.writeText(&out); err != nil {
		t.Fatal(err)
	}
	out.WriteString(localFailuresError(&Summary{Counts: Counts{LocalFailed: 1}}).Error())
	for _, line := range strings.Split(out.String(), "\n") {
		if m := pluralAfterOne.FindString(line); m != "" {
			t.Errorf("%q in: %s", m, line)
		}
	}
	if !strings.Contains(out.String(), "1 given-up tile of this flight awaits review") {
		t.Errorf("no singular given-up line:\n%s", out.String())
	}
}
