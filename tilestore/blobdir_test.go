package tilestore_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// putNew writes data as the blob name of d and commits it.
func putNew(t *testing.T, d *tilestore.BlobDir, name, data string) error {
	t.Helper()
	nb, err := d.Create(name)
	if err != nil {
		return err
	}
	if _, err := nb.Write([]byte(data)); err != nil {
		nb.Abort()
		t.Fatal(err)
	}
	return nb.Commit()
}

// noTemporaryFiles fails t if a ".put-" file is left under dir.
func noTemporaryFiles(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".put-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func TestBlobDirWritesNewBlobsPrivatelyAndReplacesExistingOnesWhole(t *testing.T) {
	t.Parallel()
	b, err := tilestore.NewBlobStore(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.OpenDir("F1/18/1")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := putNew(t, d, "7.png", "first"); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(b.Root(), "F1", "18", "1", "7.png")
	if got, err := os.ReadFile(p); err != nil || string(got) != "first" {
		t.Fatalf("blob = %q, %v; want %q", got, err, "first")
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("blob mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}

	// An existing blob: the old bytes stay whole until Commit.
	nb, err := d.Create("7.png")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nb.Write([]byte("sec")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "first" {
		t.Errorf("before Commit the blob reads %q, want the old %q", got, "first")
	}
	if _, err := nb.Write([]byte("ond")); err != nil {
		t.Fatal(err)
	}
	if err := nb.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "second" {
		t.Errorf("after Commit the blob reads %q, want %q", got, "second")
	}

	// Abort leaves the blob as it was: the old bytes, or no file.
	for _, name := range []string{"7.png", "8.png"} {
		nb, err := d.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nb.Write([]byte("half")); err != nil {
			t.Fatal(err)
		}
		nb.Abort()
	}
	if got, _ := os.ReadFile(p); string(got) != "second" {
		t.Errorf("after Abort the blob reads %q, want %q", got, "second")
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(p), "8.png")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an aborted new blob exists: %v", err)
	}
	noTemporaryFiles(t, b.Root())
}

func TestBlobDirRefusesDirectoriesNamesAndSymlinksThatLeaveTheCache(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := tilestore.NewBlobStore(filepath.Join(base, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	root := b.Root()
	for _, l := range [][2]string{
		{secret, filepath.Join(root, "F1", "leak.png")},          // a blob's name links out
		{outside, filepath.Join(root, "F2")},                     // a symlinked parent directory
		{"../../outside", filepath.Join(root, "F3", "up")},       // relative, climbing out
		{filepath.Join(root, "F1"), filepath.Join(root, "link")}, // stays inside: allowed
	} {
		if err := os.MkdirAll(filepath.Dir(l[1]), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"../x", "/etc", "F2", "F2/new", "F3/up", "F3/up/deeper"} {
		if d, err := b.OpenDir(rel); !errors.Is(err, tilestore.ErrPathEscapesRoot) {
			if d != nil {
				d.Close()
			}
			t.Errorf("OpenDir(%q) err = %v, want ErrPathEscapesRoot", rel, err)
		}
	}
	f1, err := b.OpenDir("F1")
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	for _, name := range []string{"", ".", "..", "../x", "a/b", `a\b`, "nul\x00"} {
		if nb, err := f1.Create(name); !errors.Is(err, tilestore.ErrPathEscapesRoot) {
			if nb != nil {
				nb.Abort()
			}
			t.Errorf("Create(%q) err = %v, want ErrPathEscapesRoot", name, err)
		}
	}
	if err := putNew(t, f1, "leak.png", "pwned"); !errors.Is(err, tilestore.ErrPathEscapesRoot) {
		t.Errorf("a blob over a symlink out of the cache: err = %v, want ErrPathEscapesRoot", err)
	}
	if got, _ := os.ReadFile(secret); string(got) != "s" {
		t.Errorf("the outside file was overwritten: %q", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("a directory was created outside the cache")
	}
	link, err := b.OpenDir("link")
	if err != nil {
		t.Fatalf("a symlink that stays inside the cache was refused: %v", err)
	}
	defer link.Close()
	if err := putNew(t, link, "ok.png", "fine"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "F1", "ok.png")); string(got) != "fine" {
		t.Errorf("blob through the inside symlink reads %q, want %q", got, "fine")
	}
	noTemporaryFiles(t, root)
}
