package tilestore_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func TestBlobStorePutAndOpenInsideTheRoot(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "cache")
	b, err := tilestore.NewBlobStore(root)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("root mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	data := []byte("PNG bytes of tile 18/1/7")
	size, sum, err := b.Put("F1/18/1/7.png", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	if size != int64(len(data)) || sum != hex.EncodeToString(h[:]) {
		t.Errorf("Put = %d, %s; want %d, %x", size, sum, len(data), h)
	}
	p := filepath.Join(b.Root(), "F1", "18", "1", "7.png")
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	// Overwrite replaces the content whole and leaves no temp file.
	if _, _, err := b.Put("F1/18/1/7.png", strings.NewReader("v2")); err != nil {
		t.Fatal(err)
	}
	f, err := b.Open("F1/18/1/7.png")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "v2" {
		t.Errorf("read %q, want v2", got)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the blob", len(entries))
	}
	if r, err := b.Resolve("F1/./18/../18/1/7.png"); err != nil || r != p {
		t.Errorf("Resolve of a path with . and inner .. = %q, %v; want %q", r, err, p)
	}
}

func TestBlobStoreRefusesPathsThatLeaveTheRoot(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := tilestore.NewBlobStore(filepath.Join(base, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	root := b.Root()
	mustSymlink := func(target, link string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	mustSymlink(filepath.Join(outside, "secret"), filepath.Join(root, "F1", "leak.png"))
	mustSymlink(outside, filepath.Join(root, "F2"))                            // a symlinked parent directory
	mustSymlink("../../outside", filepath.Join(root, "F3", "up"))              // relative, climbing out
	mustSymlink(filepath.Join(root, "F1"), filepath.Join(root, "inside-link")) // stays inside: allowed

	escapes := []string{
		"../x",
		"../../etc/passwd",
		"/etc/passwd",
		"F1/../../outside/secret",
		"F1/leak.png",
		"F2/secret",
		"F2/new/tile.png",
		"F3/up/secret",
	}
	for _, rel := range escapes {
		if _, err := b.Resolve(rel); !errors.Is(err, tilestore.ErrPathEscapesRoot) {
			t.Errorf("Resolve(%q) err = %v, want ErrPathEscapesRoot", rel, err)
		}
		if _, _, err := b.Put(rel, strings.NewReader("pwned")); !errors.Is(err, tilestore.ErrPathEscapesRoot) {
			t.Errorf("Put(%q) err = %v, want ErrPathEscapesRoot", rel, err)
		}
		if f, err := b.Open(rel); !errors.Is(err, tilestore.ErrPathEscapesRoot) {
			if f != nil {
				f.Close()
			}
			t.Errorf("Open(%q) err = %v, want ErrPathEscapesRoot", rel, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(outside, "secret")); string(got) != "s" {
		t.Errorf("the outside file was overwritten: %q", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("a directory was created outside the root")
	}
	if _, _, err := b.Put("inside-link/ok.png", strings.NewReader("fine")); err != nil {
		t.Errorf("a symlink that stays inside the root was refused: %v", err)
	}
	if f, err := b.Open("inside-link/ok.png"); err != nil {
		t.Errorf("Open through a symlink that stays inside the root: %v", err)
	} else {
		f.Close()
	}
	if _, err := b.Open("F1/none.png"); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, tilestore.ErrPathEscapesRoot) {
		t.Errorf("Open of a missing blob: %v, want fs.ErrNotExist", err)
	}
}
