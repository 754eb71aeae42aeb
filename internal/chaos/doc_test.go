package chaos

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The record says only what the report holds, and replacing it keeps the
// rest of the page.
func TestTheLastRunRecordTakesEveryFigureFromTheReport(t *testing.T) {
	r := &Report{Seed: 42, Rounds: 7, Tiles: 12, SequencedRounds: 3, Runs: 11, Kills: 2, DBBreaks: 5,
		DBRestarts: 6, DBRestartsMidBatch: 4, ProviderKills: 8, ProviderKillsMidBatch: 1,
		RoundsWithDBRestart: 5, RoundsWithProviderCrash: 6, Uploaded: 77, GivenUp: 7,
		ExitCodes: map[int]int{3: 7}, Faults: map[string]int{"status_429": 9},
		Checked: map[string]int{"stored-at-most-once": 77, "tile-uploaded-or-given-up": 84}, Took: 90 * time.Second}
	var b bytes.Buffer
	if err := r.WriteDoc(&b, DocRun{Command: "make chaos ROUNDS=7", Machine: "2 x Test CPU"}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{"7 rounds (3 of them", "`make chaos ROUNDS=7`", "2 x Test CPU", "1m30s wall",
		"**0 violations** over 161 evaluations of 2 invariants", "6 database restarts", "4 of them while",
		"8 provider SIGKILLs", "1 mid-batch", "5 / 6 of 7 rounds", "77 tiles uploaded", "and 7 given up",
		"2 runs were SIGKILLed and 5 database connections", "seed                                               42"} {
		if !strings.Contains(got, want) {
			t.Errorf("the record lacks %q:\n%s", want, got)
		}
	}
	r.Violations = []string{"round 3: stored twice"}
	b.Reset()
	_ = r.WriteDoc(&b, DocRun{Command: "c", Machine: "m"})
	if !strings.Contains(b.String(), "**1 violations**") || !strings.Contains(b.String(), "VIOLATION round 3: stored twice") {
		t.Errorf("a run with a violation must say so:\n%s", b.String())
	}

	page := []byte("# Soak\n\nbefore\n\n" + DocBegin + "\n\nold record\n\n" + DocEnd + "\n\nafter\n")
	out, err := ReplaceDoc(page, []byte("new record\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); strings.Contains(s, "old record") || !strings.Contains(s, "new record") ||
		!strings.HasPrefix(s, "# Soak\n\nbefore\n\n") || !strings.HasSuffix(s, DocEnd+"\n\nafter\n") {
		t.Errorf("replaced page:\n%s", out)
	}
	if _, err := ReplaceDoc([]byte("no markers"), nil); err == nil {
		t.Error("a page without markers must be an error, not rewritten")
	}
}
