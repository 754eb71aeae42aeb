package uploader

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// A pooled arena holds a batch's verified bytes while anything can still
// read them: it goes back to the pool only once its owner has released it
// and every body reader made from it was closed, and a closed reader
// refuses to read, so a reused arena never puts another batch's bytes into
// a body that net/http is still sending.
func TestABatchArenaIsReleasedOnlyAfterItsOwnerAndEveryBodyReaderAreDone(t *testing.T) {
	tiles := []tilestore.Tile{
		{ID: "t1", ContentType: "image/png", SizeBytes: 5, CapturedAt: time.Unix(0, 0)},
		{ID: "t2", ContentType: "image/png", SizeBytes: 3, CapturedAt: time.Unix(0, 0)},
	}
	tb := pooledTileBytes(tiles)
	copy(tb.arena, "abcdefgh")
	tb.data = [][]byte{tb.arena[:5], tb.arena[5:8]}
	body, err := newBatchBody("op-1", tiles, tb)
	if err != nil {
		t.Fatal(err)
	}
	first, second := body.reader(), body.reader()
	want, err := io.ReadAll(first)
	if err != nil || !bytes.Contains(want, []byte("abcde")) || !bytes.Contains(want, []byte("fgh")) {
		t.Fatalf("first attempt's body %q, %v; want the tiles' bytes", want, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	tb.release() // the owner is done; the second reader is still open
	if tb.arena == nil {
		t.Fatal("the arena was released while a body reader was still open")
	}
	got, err := io.ReadAll(second)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the open reader read %q, %v; want the same body as the first attempt", got, err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if tb.arena != nil {
		t.Error("the arena was not released after its owner and every reader were done")
	}
	if n, err := second.Read(make([]byte, 8)); n != 0 || !errors.Is(err, errBodyClosed) {
		t.Errorf("read after close: %d bytes, %v; want 0 and errBodyClosed", n, err)
	}
	if err := second.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// Arenas are sized in classes so batches of slightly different sizes
// reuse each other's, at most 12.5% too large.
func TestArenaClassesWasteAtMostAnEighth(t *testing.T) {
	for _, n := range []int64{1, 4096, 4097, 256 << 10, 256<<10 + 1, 16<<20 - 1, 16 << 20, 16<<20 + 1, 32 << 20} {
		c := arenaClass(n)
		if c < n || (n > 4096 && float64(c) > 1.125*float64(n)) {
			t.Errorf("arenaClass(%d) = %d, want in [n, 1.125n]", n, c)
		}
	}
}
