package flights

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/testbin"
)

// fullFS mounts a 1 MiB tmpfs and fills it but for a few KiB, and returns
// its directory. A real full filesystem, not an injected error: the tests
// run as root (make test and CI do), so a failed mount fails the test.
func fullFS(t *testing.T) string { return fullFSAfter(t, nil) }

// fullFSAfter is fullFS that runs before (if not nil) on the empty
// filesystem before filling it.
func fullFSAfter(t *testing.T, before func(dir string)) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a 1 MiB tmpfs at %s (this test needs root): %v: %s", dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	if before != nil {
		before(dir)
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			break // full
		}
	}
	f.Close()
	return dir
}

// The flight data recorder's ring is a file the size of its capacity,
// written through a memory map. On a disk that is full when the ring is
// created, the record of a landing cannot be written: the landing fails
// with an error that says so, and the flight is not landed.
func TestALandingWhoseRecordMeetsAFullDiskFailsClearlyAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	dir := t.TempDir()
	testbin.WriteTile(t, dir, 0, 11)
	s.MustRun("tiles", "import", "--flight", "F1", "--state", "airborne", dir)
	full := fullFS(t)
	s.Env = append(s.Env, "TILECTL_FDR_PATH="+filepath.Join(full, "fdr.ring"))
	r := s.Run("flights", "land", "F1")
	if r.Exit != 1 || !strings.Contains(r.Stderr, "flight data recorder") || !strings.Contains(r.Stderr, "no space left on device") {
		t.Fatalf("landing with the FDR on a full disk: exit %d\n%s", r.Exit, r.Stderr)
	}
	if f := s.flight("F1"); f.State != "airborne" {
		t.Fatalf("F1 is %s after a landing whose record failed", f.State)
	}
	r = s.Run("flights", "delete", "F1", "--reason", "x", "--yes", "--force")
	if r.Exit != 1 || !strings.Contains(r.Stderr, "no space left on device") {
		t.Fatalf("delete with the FDR on a full disk: exit %d\n%s", r.Exit, r.Stderr)
	}
	if f := s.flight("F1"); f.Total != 1 || !exists(s.blob("F1", 0)) {
		t.Fatalf("F1 changed by a delete whose record failed: %+v", f)
	}
}

// A metrics file that cannot be written for a full disk fails the run
// (exit 1, naming the file and the cause) after the upload itself is done
// and recorded; the previous file is left whole and no temporary file
// stays behind.
func TestAMetricsFileOnAFullDiskFailsTheRunClearlyAndLeavesThePreviousFileWhole(t *testing.T) {
	t.Parallel()
	s := newStation(t)
	dir := t.TempDir()
	testbin.WriteTile(t, dir, 0, 12)
	s.MustRun("tiles", "import", "--flight", "F1", dir)
	const old = "# previous run\ntilectl_last_run_success{flight=\"F0\"} 1\n"
	full := fullFSAfter(t, func(d string) {
		if err := os.WriteFile(filepath.Join(d, "tilectl.prom"), []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	s.Env = append(s.Env, "TILECTL_UPLOAD_METRICS_FILE="+filepath.Join(full, "tilectl.prom"))
	r := s.Run("upload-pending", "--flight", "F1")
	if r.Exit != 1 || !strings.Contains(r.Stderr, "write metrics file "+filepath.Join(full, "tilectl.prom")) ||
		!strings.Contains(r.Stderr, "no space left on device") {
		t.Fatalf("upload-pending with its metrics file on a full disk: exit %d\n%s", r.Exit, r.Stderr)
	}
	if f := s.flight("F1"); f.Counts["uploaded"] != 1 || f.LastRun == nil || !f.LastRun.Finished {
		t.Fatalf("the upload and its history: %+v", f)
	}
	if b, err := os.ReadFile(filepath.Join(full, "tilectl.prom")); err != nil || string(b) != old {
		t.Fatalf("previous metrics file: %q, %v", b, err)
	}
	ents, _ := os.ReadDir(full)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("a temporary metrics file stayed behind: %s", e.Name())
		}
	}
}
