package security

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLocalFilesAreOwnerOnly runs import and upload with umask 0, so any
// file or directory tilectl creates without an explicit owner-only mode
// shows up as group- or world-accessible: every file in the cache and the
// FDR must be 0600 and every directory 0700.
func TestLocalFilesAreOwnerOnly(t *testing.T) {
	srv := httptest.NewServer(&fakeProvider{})
	defer srv.Close()
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	c := newCLI(t, srv.URL, "perm-token-0123456789")
	c.importFlight("perms", 3)
	c.mustRun("upload-pending", "--flight", "perms", "-o", "json", "--deadline", "30s")
	c.mustRun("fdr", "tail", "-o", "json")

	if _, err := os.Stat(c.fdr); err != nil {
		t.Fatalf("no FDR file after a run: %v", err)
	}
	checked := 0
	for _, root := range []string{c.cache, filepath.Dir(c.fdr)} {
		err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			checked++
			mode := fi.Mode().Perm()
			want := os.FileMode(0o600)
			if fi.IsDir() {
				want = 0o700
			}
			if mode&0o077 != 0 || mode != want {
				t.Errorf("%s has mode %04o, want %04o", p, mode, want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", root, err)
		}
	}
	if checked < 4 {
		t.Errorf("only %d paths checked; the cache seems empty", checked)
	}
}
