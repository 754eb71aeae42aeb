package tilestore_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func readBlob(t *testing.T, b *tilestore.BlobStore, rel string) (string, error) {
	t.Helper()
	f, err := b.Open(rel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(data), nil
}

func putBlob(t *testing.T, b *tilestore.BlobStore, rel, data string) {
	t.Helper()
	if _, _, err := b.Put(rel, strings.NewReader(data)); err != nil {
		t.Fatalf("put %s: %v", rel, err)
	}
}

// Open keeps the directories it read from open; what it reads must still be
// what is on disk now: a blob replaced, a directory removed and made again,
// a blob that is a symlink to a sibling directory, more directories than
// it keeps.
func TestOpenReadsWhatIsOnDiskNowThroughTheDirectoriesItKeepsOpen(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	b, err := tilestore.NewBlobStore(root)
	if err != nil {
		t.Fatal(err)
	}
	putBlob(t, b, "F/18/3/7.png", "first bytes")
	if got, err := readBlob(t, b, "F/18/3/7.png"); err != nil || got != "first bytes" {
		t.Fatalf("first read: %q, %v", got, err)
	}
	putBlob(t, b, "F/18/3/7.png", "second bytes") // renamed over the first
	if got, err := readBlob(t, b, "F/18/3/7.png"); err != nil || got != "second bytes" {
		t.Fatalf("after the blob was replaced: %q, %v; want the new bytes", got, err)
	}

	if err := os.RemoveAll(filepath.Join(b.Root(), "F", "18", "3")); err != nil {
		t.Fatal(err)
	}
	if _, err := readBlob(t, b, "F/18/3/7.png"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after its directory was removed: %v, want not exist", err)
	}
	putBlob(t, b, "F/18/3/7.png", "third bytes") // a new directory of the same name
	if got, err := readBlob(t, b, "F/18/3/7.png"); err != nil || got != "third bytes" {
		t.Fatalf("after its directory was made again: %q, %v; want the new directory's blob", got, err)
	}

	// A symlink to a blob of a sibling directory stays inside the cache.
	putBlob(t, b, "F/18/4/1.png", "sibling bytes")
	if err := os.Symlink("../4/1.png", filepath.Join(b.Root(), "F", "18", "3", "9.png")); err != nil {
		t.Fatal(err)
	}
	if got, err := readBlob(t, b, "F/18/3/9.png"); err != nil || got != "sibling bytes" {
		t.Fatalf("symlink to a sibling directory's blob: %q, %v", got, err)
	}
	// One that leaves the cache is refused, as from the root.
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(b.Root(), "F", "18", "3", "8.png")); err != nil {
		t.Fatal(err)
	}
	if got, err := readBlob(t, b, "F/18/3/8.png"); err == nil {
		t.Fatalf("a symlink out of the cache was read: %q", got)
	}

	// More directories than the cache keeps, read twice over.
	for round := range 2 {
		for x := range 150 {
			rel := fmt.Sprintf("G/18/%d/0.png", x)
			if round == 0 {
				putBlob(t, b, rel, rel)
			}
			if got, err := readBlob(t, b, rel); err != nil || got != rel {
				t.Fatalf("round %d, %s: %q, %v", round, rel, got, err)
			}
		}
	}
}
