package flights

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/tilestore"
)

// deleted reads the flight.deleted records back from the FDR file.
func (s *station) deleted() []DeletedPayload {
	s.T.Helper()
	out := s.MustRun("fdr", "tail", "--kind", DeletedKind, "-o", "json", "--file", s.FDR)
	var ps []DeletedPayload
	for _, line := range strings.Split(strings.TrimSpace(out.Stdout), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Payload DeletedPayload `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			s.T.Fatalf("fdr tail line %q: %v", line, err)
		}
		ps = append(ps, rec.Payload)
	}
	return ps
}

func TestDeleteIsRefusedWhileTilesWaitNeedsYesOffATerminalAndRecordsWhoAndWhy(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	dir := t.TempDir()
	for i := range 4 {
		testbin.WriteTile(t, dir, i, 5)
	}
	s.MustRun("tiles", "import", "--flight", "F1", dir)
	s.MustRun("tiles", "import", "--flight", "F2", dir)

	// Pending tiles: refused, with or without --yes; nothing changes.
	r := s.Run("flights", "delete", "F1", "--reason", "bad survey", "--yes")
	if r.Exit != 1 || !strings.Contains(r.Stderr, "4 tiles are not yet uploaded") || !strings.Contains(r.Stderr, "--force") {
		t.Fatalf("delete of a flight with pending tiles: exit %d\n%s", r.Exit, r.Stderr)
	}
	if r := s.Run("flights", "delete", "F1"); r.Exit != 2 || !strings.Contains(r.Stderr, "--reason is required") {
		t.Fatalf("delete without --reason: exit %d\n%s", r.Exit, r.Stderr)
	}
	s.MustRun("upload-pending", "--flight", "F1")
	// Uploaded, but off a terminal without --yes: refused, naming --yes.
	r = s.Run("flights", "delete", "F1", "--reason", "bad survey")
	if r.Exit != 2 || !strings.Contains(r.Stderr, "pass --yes") {
		t.Fatalf("delete off a terminal without --yes: exit %d\n%s", r.Exit, r.Stderr)
	}
	if f := s.flight("F1"); f.Total != 4 || !exists(s.blob("F1", 0)) || len(s.deleted()) != 0 {
		t.Fatalf("a refused delete changed something: %+v", f)
	}

	out := s.MustRun("flights", "delete", "F1", "--reason", "bad survey", "--yes", "-o", "json")
	var rep DeleteReport
	if err := json.Unmarshal([]byte(out.Stdout), &rep); err != nil {
		t.Fatalf("delete -o json: %v\n%s", err, out.Stdout)
	}
	if !rep.Deleted || rep.Tiles != 4 || rep.Batches < 1 || rep.Runs != 1 || rep.Files != 4 || rep.DiskBytes <= 0 {
		t.Fatalf("delete report: %+v", rep)
	}
	if exists(filepath.Join(s.Cache, "F1")) {
		t.Fatal("F1's blob directory is still there")
	}
	for _, table := range []string{"tiles", "upload_batches", "upload_runs", "flights"} {
		if n := s.count(`SELECT count(*) FROM ` + table + ` WHERE flight_id = 'F1'`); n != 0 {
			t.Errorf("%s: %d rows of F1 left", table, n)
		}
	}
	if f := s.flight("F2"); f.Total != 4 || !exists(s.blob("F2", 0)) {
		t.Fatalf("F2 was touched: %+v", f)
	}
	recs := s.deleted()
	if len(recs) != 1 || recs[0].FlightID != "F1" || recs[0].Reason != "bad survey" || recs[0].User == "" ||
		recs[0].Host == "" || recs[0].Tiles != 4 || recs[0].Forced {
		t.Fatalf("deletion records: %+v", recs)
	}
	if r := s.Run("flights", "delete", "F1", "--reason", "again", "--yes"); r.Exit != 2 || !strings.Contains(r.Stderr, "not recorded") {
		t.Fatalf("delete of a deleted flight: exit %d\n%s", r.Exit, r.Stderr)
	}

	// --force deletes a flight with pending tiles, and the record says so.
	s.MustRun("flights", "delete", "F2", "--reason", "duplicate import", "--yes", "--force")
	if recs := s.deleted(); len(recs) != 2 || !recs[1].Forced || recs[1].Waiting != 4 {
		t.Fatalf("forced deletion record: %+v", recs)
	}
	// The same tiles import again as a new flight.
	s.MustRun("tiles", "import", "--flight", "F2", dir)
	if f := s.flight("F2"); f.Total != 4 || f.Counts["pending"] != 4 {
		t.Fatalf("F2 imported again: %+v", f)
	}
}

func TestDeleteIsRefusedWhileAnImportHoldsTheFlightsCacheLockEvenWithForce(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	dir := t.TempDir()
	testbin.WriteTile(t, dir, 0, 6)
	s.MustRun("tiles", "import", "--flight", "F1", dir)
	blobs, err := tilestore.NewBlobStore(s.Cache)
	if err != nil {
		t.Fatal(err)
	}
	// What a running import holds (shared), taken here by this process.
	l, err := blobs.LockFlight("F1", false)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Run("flights", "delete", "F1", "--reason", "x", "--yes", "--force")
	l.Release()
	if r.Exit != 1 || !strings.Contains(r.Stderr, "a tiles import of flight F1 is running") {
		t.Fatalf("delete during an import: exit %d\n%s", r.Exit, r.Stderr)
	}
	if f := s.flight("F1"); f.Total != 1 {
		t.Fatalf("the refused delete changed F1: %+v", f)
	}
	// And an import is refused while a delete holds the lock.
	x, err := blobs.LockFlight("F1", true)
	if err != nil {
		t.Fatal(err)
	}
	r = s.Run("tiles", "import", "--flight", "F1", dir)
	x.Release()
	if r.Exit != 1 || !strings.Contains(r.Stderr, "is being deleted") {
		t.Fatalf("import during a delete: exit %d\n%s", r.Exit, r.Stderr)
	}
}

func TestDeleteIsRefusedWhileAnUploadRunWorksOnTheFlight(t *testing.T) {
	t.Parallel()
	s := newStationWith(t, nil)
	dir := t.TempDir()
	for i := range 3 {
		testbin.WriteTile(t, dir, i, 7)
	}
	s.MustRun("tiles", "import", "--flight", "F1", dir)
	s.MustRun("upload-pending", "--flight", "F1")
	// A run of this machine that has not ended and holds its run lock:
	// its history row, and its lock file held by this process.
	s.count(`WITH r AS (INSERT INTO upload_runs (run_id, flight_id, host, pid, started_at)
		VALUES ('live-run', 'F1', 'here', 1, now()) RETURNING 1) SELECT count(*) FROM r`)
	held, err := tilestore.NewRunLocks(s.Cache).Hold("live-run")
	if err != nil {
		t.Fatal(err)
	}
	r := s.Run("flights", "delete", "F1", "--reason", "x", "--yes")
	if r.Exit != 1 || !strings.Contains(r.Stderr, "an upload-pending run is working on it: run live-run") {
		t.Fatalf("delete while a run holds the flight: exit %d\n%s", r.Exit, r.Stderr)
	}
	held.Release()
	// Its lock released (the run ended without recording it): deleted.
	s.MustRun("flights", "delete", "F1", "--reason", "x", "--yes")
}

func TestDeleteAsksForTheFlightIDOnATerminal(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	dir := t.TempDir()
	testbin.WriteTile(t, dir, 0, 8)
	s.MustRun("tiles", "import", "--flight", "F1", dir)
	s.MustRun("upload-pending", "--flight", "F1")
	for _, tc := range []struct {
		answer string
		exit   int
	}{{"no\n", 1}, {"F1\n", 0}} {
		cmd := exec.Command("script", "-qec", s.Bin+" flights delete F1 --reason tty", "/dev/null")
		cmd.Env = s.Env
		cmd.Stdin = strings.NewReader(tc.answer)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		testbin.RunFor(t, cmd, time.Minute)
		if got := cmd.ProcessState.ExitCode(); got != tc.exit || !strings.Contains(out.String(), "Type the flight ID to go on") {
			t.Fatalf("answer %q: exit %d, want %d\n%s", tc.answer, got, tc.exit, out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(s.Cache, "F1")); err == nil {
		t.Fatal("confirmed on the terminal, F1's blobs are still there")
	}
}
