package uploader

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/tilectl/tilectl/tilestore"
)

// tileBytes holds the verified bytes of one batch's tiles, read once into
// one arena sized from the metadata (tiles are at most the provider's
// max_tile_bytes, batches at most its max_batch_bytes).
//
// A claimed batch's arena comes from arenas and goes back only when nothing
// can read it any more: its owner has called release (after the batch's
// last send) and every body reader made from it was closed. net/http may
// read a request body after Do returns, until it closes it; a closed
// reader refuses to read, so a reused arena can never put another batch's
// bytes into a body. A reader that is never closed keeps its arena out of
// the pool for good (the GC takes it), which costs memory, not safety.
type tileBytes struct {
	arena []byte
	off   int
	data  [][]byte // the bytes of each tile read so far, in order

	pooled bool
	refs   atomic.Int64 // the owner's, plus one per open body reader
}

// arenas holds released arenas (*[]byte) for the next claimed batches: a
// 64 KiB-tile batch is 16 MiB, which allocated afresh per batch is zeroed
// and faulted in again each time. A new large arena is advised to the
// kernel for huge pages (adviseHugePages), so that its first fill takes a
// page fault per 2 MiB rather than per 4 KiB.
var arenas sync.Pool

// newTileBytes sizes an unpooled arena for tiles: for the rare resends of
// an earlier run's batches.
func newTileBytes(tiles []tilestore.Tile) *tileBytes {
	return &tileBytes{arena: make([]byte, arenaSize(tiles)), data: make([][]byte, 0, len(tiles))}
}

// pooledTileBytes is newTileBytes with an arena from arenas; the caller
// calls release once the batch has been sent for the last time.
func pooledTileBytes(tiles []tilestore.Tile) *tileBytes {
	n := arenaSize(tiles)
	var arena []byte
	if p, ok := arenas.Get().(*[]byte); ok && int64(cap(*p)) >= n {
		arena = (*p)[:n]
	} else {
		// A smaller arena from the pool is left to the GC.
		full := make([]byte, arenaClass(n))
		adviseHugePages(full) // before the reads first touch it
		arena = full[:n]
	}
	tb := &tileBytes{arena: arena, data: make([][]byte, 0, len(tiles)), pooled: true}
	tb.refs.Store(1)
	return tb
}

func arenaSize(tiles []tilestore.Tile) int64 {
	var total int64
	for _, t := range tiles {
		total += max(t.SizeBytes, 0)
	}
	return total
}

// arenaClass rounds n up to a multiple of an eighth of the power of two
// below it, so batches of slightly different sizes share pooled arenas at
// most 12.5% too large.
func arenaClass(n int64) int64 {
	if n <= 4096 {
		return 4096
	}
	step := int64(1) << (bits.Len64(uint64(n-1)) - 4) // an eighth of the power of two below n
	return (n + step - 1) / step * step
}

// acquire counts one more reader of the arena.
func (tb *tileBytes) acquire() { tb.refs.Add(1) }

// release drops one reference (the owner's, or a closed reader's); the
// last one puts a pooled arena back.
func (tb *tileBytes) release() {
	if tb.refs.Add(-1) != 0 || !tb.pooled {
		return
	}
	a := tb.arena[:0]
	tb.arena, tb.data = nil, nil
	arenas.Put(&a)
}

// read reads and checks t's blob (see readBlob); on success its bytes are
// appended to data.
func (tb *tileBytes) read(blobs BlobSource, t tilestore.Tile) (*LocalFailure, error) {
	if t.SizeBytes < 0 || int64(len(tb.arena)-tb.off) < t.SizeBytes {
		return blobFailure(blobs, t, ProblemBlobWrongSize, fmt.Sprintf("the tile's metadata size %d is not usable", t.SizeBytes)), nil
	}
	dst := tb.arena[tb.off : tb.off+int(t.SizeBytes) : tb.off+int(t.SizeBytes)]
	if lf, err := readBlob(blobs, t, dst); lf != nil || err != nil {
		return lf, err
	}
	tb.off += len(dst)
	tb.data = append(tb.data, dst)
	return nil, nil
}
