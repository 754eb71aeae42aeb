package uploader

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// One claim's batches are the batches claims of their own would form, one
// after the other: a tile too large leaves its batch one tile short, as a
// dry run counts it, instead of the next batch's first tile filling it.
func TestPickManyFormsTheBatchesClaimsOfTheirOwnWould(t *testing.T) {
	t.Parallel()
	lim := limits{tiles: 2, bytes: 1 << 20, tileBytes: 64 << 10}
	var cands []tilestore.Tile
	for i := range 7 {
		size := int64(1024)
		if i == 3 {
			size = 70000 // over max_tile_bytes
		}
		cands = append(cands, tilestore.Tile{ID: fmt.Sprintf("F-1-0-%d", i), SizeBytes: size, SHA256: "s"})
	}
	bs, rs := pickMany("F", "op-first", 8, cands, lim)
	var got [][]string
	for _, b := range bs {
		got = append(got, b.TileIDs)
	}
	want := [][]string{{"F-1-0-0", "F-1-0-1"}, {"F-1-0-2"}, {"F-1-0-4", "F-1-0-5"}, {"F-1-0-6"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	if len(rs) != 1 || rs[0].TileID != "F-1-0-3" {
		t.Fatalf("rejections %+v, want the one too large", rs)
	}
	ops := map[string]bool{}
	for _, b := range bs {
		ops[b.OpID] = true
	}
	if bs[0].OpID != "op-first" || len(ops) != len(bs) {
		t.Fatalf("op IDs %v: want the first the claim's and each its own", ops)
	}
	if bs, _ := pickMany("F", "op-first", 2, cands, lim); len(bs) != 2 {
		t.Fatalf("asked for 2 batches, got %d", len(bs))
	}
}
