package opsafety

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
)

// The story: tiles imported with --cache-dir A, upload-pending run
// with the configured cache dir B.
func TestWrongCacheDirSendsNothingCountsNothingAndNamesTheDirAndWhereItCameFrom(t *testing.T) {
	t.Parallel()
	s := newStation(t, providertest.Start(t, nil))
	imported := filepath.Join(t.TempDir(), "cache-A")
	s.importFlight("F1", 12, "--cache-dir", imported)

	dry := s.Run("upload-pending", "--flight", "F1", "--dry-run")
	if dry.Exit != 1 || strings.Contains(dry.Stdout, "would send") {
		t.Errorf("dry run: exit %d, stdout %q; want exit 1 and no 'would send'", dry.Exit, dry.Stdout)
	}
	for range 2 { // a second run must not give up what the first left alone
		r, sum := s.uploadJSON("--flight", "F1")
		if r.Exit == 0 || r.Exit == 3 {
			t.Fatalf("exit %d, want a failure other than 3\nstderr: %s", r.Exit, r.Stderr)
		}
		for _, want := range []string{s.Cache, "env TILECTL_CACHE_DIR", "tiles verify"} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, r.Stderr)
			}
		}
		if sum["given_up"] != 0.0 {
			t.Errorf("summary given_up = %v", sum["given_up"])
		}
	}
	if held := s.heldByProvider(); len(held) != 0 {
		t.Fatalf("the provider holds %d tiles; nothing should have been sent", len(held))
	}
	for id, tl := range s.tiles("F1") {
		if tl.Status != "pending" || tl.Attempts != 0 {
			t.Errorf("tile %s: %s with %d attempts, want pending with 0", id, tl.Status, tl.Attempts)
		}
	}
	// Pointing tilectl at the right dir then uploads everything.
	s.MustRun("--cache-dir", imported, "upload-pending", "--flight", "F1")
	if held := s.heldByProvider(); len(held) != 12 {
		t.Fatalf("the provider holds %d tiles after the run with the right cache dir, want 12", len(held))
	}
}
