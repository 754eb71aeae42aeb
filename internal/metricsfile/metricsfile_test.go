package metricsfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteFileHasEverySeriesAndLeavesNoTempFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tilectl.prom")
	m := New()
	m.Add(Counts{Accepted: 7, Duplicate: 2, Rejected: 3, GivenUp: 1, Retries: 2, Timeouts: 4, Replayed: 5, Concurrency: 24})
	m.Add(Counts{Concurrency: 9}) // a second flight: the gauge keeps the highest
	m.ObserveBatch(300 * time.Millisecond)
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		`tilectl_tiles_total{outcome="accepted"} 7`,
		`tilectl_tiles_total{outcome="duplicate"} 2`,
		`tilectl_tiles_total{outcome="rejected"} 3`,
		`tilectl_tiles_total{outcome="given_up"} 1`,
		`tilectl_retries_total 2`,
		`tilectl_giveups_total 1`,
		`tilectl_timeouts_total 4`,
		`tilectl_replayed_answers_total 5`,
		`tilectl_upload_concurrency 24`,
		`tilectl_batch_latency_seconds_bucket{le="0.5"} 1`,
		`tilectl_batch_latency_seconds_count 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics file lacks %q:\n%s", want, text)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the metrics file", len(entries))
	}
}

func TestWriteFileIntoMissingDirectoryFailsAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := New().WriteFile(filepath.Join(dir, "nope", "m.prom")); err == nil {
		t.Fatal("want an error for a missing directory")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %d entries behind", len(entries))
	}
}

func TestZeroRunStillHasEverySeries(t *testing.T) {
	b, err := New().Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`outcome="given_up"} 0`, "tilectl_retries_total 0", "tilectl_batch_latency_seconds_count 0"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("lacks %q", want)
		}
	}
}

func TestAFlightsPendingTilesHaveASampleOnlyWhenCounted(t *testing.T) {
	m := New()
	five := 5
	m.AddFlight(FlightRun{Flight: "F1", Pending: &five})
	m.AddFlight(FlightRun{Flight: "F2"}) // its count failed: not known
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, `tilectl_upload_pending_tiles{flight="F1"} 5`) {
		t.Errorf("no pending sample for the counted flight:\n%s", text)
	}
	if strings.Contains(text, `tilectl_upload_pending_tiles{flight="F2"}`) || strings.Contains(text, "NaN") {
		t.Errorf("a sample for a count that is not known:\n%s", text)
	}
}
