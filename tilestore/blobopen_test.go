package tilestore_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

// ReadExactly is Open's fast path for a reader that knows the blob's size:
// it reads the right bytes or returns false (the caller then takes Open),
// never wrong bytes, and never follows a symlink or waits on a FIFO.
func TestReadExactlyReadsTheBlobOrSendsTheCallerToOpen(t *testing.T) {
	t.Parallel()
	b, err := tilestore.NewBlobStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string, size int) (string, bool) {
		dst := make([]byte, size)
		ok := b.ReadExactly(rel, dst)
		return string(dst), ok
	}
	putBlob(t, b, "F/18/3/7.png", "first bytes")
	if got, ok := read("F/18/3/7.png", len("first bytes")); !ok || got != "first bytes" {
		t.Fatalf("a blob of the size given: %q, %v", got, ok)
	}
	for _, size := range []int{len("first bytes") - 1, len("first bytes") + 1, 0} {
		if _, ok := read("F/18/3/7.png", size); ok {
			t.Errorf("a blob of %d bytes was read as one of %d", len("first bytes"), size)
		}
	}
	putBlob(t, b, "F/18/3/7.png", "second bytes") // renamed over the first
	if got, ok := read("F/18/3/7.png", len("second bytes")); !ok || got != "second bytes" {
		t.Fatalf("after the blob was replaced: %q, %v; want the new bytes", got, ok)
	}
	putBlob(t, b, "F/18/3/empty.png", "")
	if _, ok := read("F/18/3/empty.png", 0); !ok {
		t.Error("an empty blob read as 0 bytes: false")
	}

	// Removed with its directory, then made again: false or the new bytes.
	if err := os.RemoveAll(filepath.Join(b.Root(), "F", "18", "3")); err != nil {
		t.Fatal(err)
	}
	if _, ok := read("F/18/3/7.png", len("second bytes")); ok {
		t.Fatal("a removed blob was read")
	}
	putBlob(t, b, "F/18/3/7.png", "third bytes!")
	if got, ok := read("F/18/3/7.png", len("third bytes!")); ok && got != "third bytes!" {
		t.Fatalf("after its directory was made again: %q; want the new blob's bytes or false", got)
	}

	// Symlinks, in the cache or out of it, a FIFO, a directory, an escape:
	// false, and promptly (a FIFO opened without O_NONBLOCK waits for a
	// writer).
	putBlob(t, b, "F/18/4/1.png", "sibling bytes")
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret bytes!"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(b.Root(), "F", "18", "4")
	if err := os.Symlink("1.png", filepath.Join(dir, "9.png")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "8.png")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.png"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.png"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A directory that is a symlink out of the cache, to a file of the
	// size asked for.
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(b.Root(), "F", "18", "out")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, rel := range []string{"F/18/4/9.png", "F/18/4/8.png", "F/18/4/fifo.png", "F/18/4/dir.png",
			"F/18/out/secret", "F/18/../../" + filepath.Base(filepath.Dir(outside)) + "/secret", "F/18/4/..", "7.png"} {
			if got, ok := read(rel, len("secret bytes!")); ok {
				t.Errorf("%s was read: %q", rel, got)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ReadExactly did not return within 10 s (a FIFO waiting for a writer?)")
	}
	// Open still reads the symlink that stays in the cache.
	if got, err := readBlob(t, b, "F/18/4/9.png"); err != nil || got != "sibling bytes" {
		t.Fatalf("Open of a symlink to a blob beside it: %q, %v", got, err)
	}

	// More directories than the cache keeps, from several goroutines: the
	// cache closes directories while others read through them.
	for x := range 150 {
		rel := fmt.Sprintf("G/18/%d/0.png", x)
		putBlob(t, b, rel, rel)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for round := range 3 {
				for x := range 150 {
					rel := fmt.Sprintf("G/18/%d/0.png", (x+37*g)%150)
					got, ok := read(rel, len(rel))
					if ok && got != rel {
						t.Errorf("goroutine %d, round %d: %s read as %q", g, round, rel, got)
					}
				}
			}
		})
	}
	wg.Wait()
	for x := range 150 {
		rel := fmt.Sprintf("G/18/%d/0.png", x)
		if got, ok := read(rel, len(rel)); !ok || got != rel {
			t.Fatalf("%s alone: %q, %v", rel, got, ok)
		}
	}
}

// BenchmarkBlobRead reads 1 KiB blobs of a z/x/y layout: through Open (an
// *os.File: open, stat, read, close) and through ReadExactly, which the
// uploader takes.
func BenchmarkBlobRead(b *testing.B) {
	bs, err := tilestore.NewBlobStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	const files = 1024
	data := strings.Repeat("x", 1024)
	rels := make([]string, files)
	for i := range rels {
		rels[i] = fmt.Sprintf("F/18/%d/%d.png", i/256, i%256)
		if _, _, err := bs.PutDeferred(rels[i], strings.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	dst := make([]byte, len(data))
	b.Run("Open", func(b *testing.B) {
		for i := range b.N {
			f, err := bs.Open(rels[i%files])
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.Stat(); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(f, dst); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("ReadExactly", func(b *testing.B) {
		for i := range b.N {
			if !bs.ReadExactly(rels[i%files], dst) {
				b.Fatal("not read")
			}
		}
	})
}
