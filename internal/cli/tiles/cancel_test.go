package tiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// cancelAfter is a context that is cancelled at its n-th Err call: the
// import's walk asks once per directory entry, so the cancel lands at a
// chosen file of the walk, as a SIGINT would at some moment.
type cancelAfter struct {
	context.Context
	n, calls atomic.Int64
	once     sync.Once
	done     chan struct{}
}

func newCancelAfter(n int64) *cancelAfter {
	c := &cancelAfter{Context: context.Background(), done: make(chan struct{})}
	c.n.Store(n)
	return c
}

func (c *cancelAfter) Done() <-chan struct{} { return c.done }

func (c *cancelAfter) Err() error {
	if c.calls.Add(1) >= c.n.Load() {
		c.once.Do(func() { close(c.done) })
	}
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// walkEntries is how many entries (directories and files, the top one
// included) a walk of dir visits.
func walkEntries(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	if err := filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// writePNGTiles writes n distinct small PNG tiles at zoom 8 under a new
// directory and returns it.
func writePNGTiles(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		img := image.NewGray(image.Rect(0, 0, 2, 2))
		img.Pix[0], img.Pix[1] = uint8(i), uint8(i>>8)
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		put(t, dir, fmt.Sprintf("8/%d/%d.png", i/16, i%16), buf.Bytes())
	}
	return dir
}

func TestACancelledImportLeavesOnlyWholeChunksWithDurableBlobsAndTheNextImportFinishes(t *testing.T) {
	const tiles = 200
	e := newEnv(t)
	dir := writePNGTiles(t, tiles)
	// Cancelled in the second pass (the first walks every entry once),
	// about halfway through, with chunks of 10: the walk asks once per
	// entry, the database calls a few times per chunk.
	ctx := newCancelAfter(walkEntries(t, dir) + tiles/2)
	err := ImportRun(ctx, &ImportOptions{
		IO: e.f.IOStreams, Config: e.f.Config, Store: e.f.Store,
		Dir: dir, FlightID: "flt-c", State: tilestore.FlightOnGround, BatchSize: 10, Output: "json",
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	s := e.store(t)
	bg := context.Background()
	n, _, err := s.PendingSummary(bg, "flt-c")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tiles recorded before the cancel", n)
	if n == 0 || n == tiles || n%10 != 0 {
		t.Fatalf("%d tiles recorded, want whole chunks of 10, some but not all", n)
	}
	ids := make([]string, tiles)
	for i := range ids {
		ids[i] = fmt.Sprintf("flt-c-8-%d-%d", i/16, i%16)
	}
	recorded, err := s.TilesByID(bg, ids)
	if err != nil || len(recorded) != n {
		t.Fatalf("TilesByID: %d tiles, %v; want %d", len(recorded), err, n)
	}
	for _, tl := range recorded {
		b, err := os.ReadFile(filepath.Join(e.cache, filepath.FromSlash(tl.BlobPath)))
		sum := sha256.Sum256(b)
		if err != nil || hex.EncodeToString(sum[:]) != tl.SHA256 {
			t.Errorf("tile %s is recorded but its blob is missing or other bytes (%v)", tl.ID, err)
		}
	}
	noTemporaryFiles(t, e.cache)

	sum, err := e.importDir(dir, "flt-c", false)
	if err != nil {
		t.Fatalf("import after the cancel: %v", err)
	}
	if sum.Imported != tiles-n || sum.AlreadyPresent != n {
		t.Fatalf("import after the cancel: %+v, want %d imported and %d already present", sum, tiles-n, n)
	}
}

// noTemporaryFiles fails t if a blob store's temporary file is left under
// dir.
func noTemporaryFiles(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".put-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}
