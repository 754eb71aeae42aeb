package upload

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSummaryReadsAtAGlance(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	awaiting := int64(9)
	s := &Summary{Outcome: "partial", Flights: []FlightSummary{{
		FlightID: "F1", Outcome: "partial", Started: start, Finished: start.Add(12500 * time.Millisecond),
		Counts: Counts{Uploaded: 46, Accepted: 44, Duplicate: 2, Rejected: 12, RejectedTiles: 5, GivenUp: 2, StillPending: new(0), StillPendingBytes: new(int64(0)),
			Batches: 24, Bytes: 5 << 20},
		GiveUpsAwaitingReview: &awaiting,
	}}}
	s.Counts = s.Flights[0].Counts
	var out bytes.Buffer
	if err := s.writeText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"flight F1: partial in 12.5s: 46 uploaded (44 accepted, 2 duplicate), 2 given up, 0 still pending",
		"12 rejections (5 tiles)",
		"5.0 MiB sent at 409.6 KiB/s, 3.7 tiles/s",
		"9 given-up tiles of this flight await review (7 from earlier runs)",
		"next: review the given-up tiles: tilectl status --flight F1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "5242880") {
		t.Errorf("raw byte count in the text summary:\n%s", text)
	}
}
