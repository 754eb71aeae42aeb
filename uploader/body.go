package uploader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"strconv"
	"sync"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// manifestTile is one entry of the manifest part (docs/provider-api.md).
type manifestTile struct {
	TileID      string `json:"tile_id"`
	Z           int    `json:"z"`
	X           int64  `json:"x"`
	Y           int64  `json:"y"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	CapturedAt  string `json:"captured_at"`
}

type manifest struct {
	Tiles []manifestTile `json:"tiles"`
}

func manifestEntry(t tilestore.Tile) manifestTile {
	return manifestTile{
		TileID: t.ID, Z: t.Z, X: t.X, Y: t.Y, ContentType: t.ContentType,
		Size: t.SizeBytes, SHA256: t.SHA256, CapturedAt: t.CapturedAt.UTC().Format(time.RFC3339),
	}
}

// fingerprint names a batch's content the way the provider's idempotency
// check sees it: the flight, then each tile_id and sha256 in manifest order.
// It is journaled with the batch so a resend after a crash can prove it
// rebuilds the same body.
func fingerprint(flightID string, ids, sums []string) string {
	h := sha256.New()
	h.Write([]byte(flightID))
	for i := range ids {
		h.Write([]byte{0})
		h.Write([]byte(ids[i]))
		h.Write([]byte{0})
		h.Write([]byte(sums[i]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// batchBody is one batch's multipart body. The boundary is derived from
// the operation ID and the tiles' bytes were read and verified once, before
// the batch was journaled, so every resend is byte-for-byte the same body.
// It is held as segments (framing, tile bytes, framing, ...) and read
// straight from them: no copy into a body buffer, no goroutine per send.
type batchBody struct {
	opID   string
	segs   [][]byte
	length int64
	bytes  *tileBytes // the arena the tiles' segments are in
}

// newBatchBody lays out the body of tiles whose verified bytes are
// tb.data (in the same order). The framing is byte for byte what
// multipart.Writer writes for these parts (TestBatchFramingIsMultipartWriters),
// appended into one buffer: no header map, sort or Sprintf per tile. Each
// tile's bytes go where its part's content starts.
func newBatchBody(opID string, tiles []tilestore.Tile, tb *tileBytes) (*batchBody, error) {
	data := tb.data
	if len(data) != len(tiles) {
		return nil, fmt.Errorf("batch %s: %d tiles but %d verified blobs", opID, len(tiles), len(data))
	}
	m := manifest{Tiles: make([]manifestTile, len(tiles))}
	for i, t := range tiles {
		m.Tiles[i] = manifestEntry(t)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest of batch %s: %w", opID, err)
	}
	bnd := boundaryFor(opID)
	// multipart.Writer's check of the boundary, which a journaled op ID
	// read back from the database must pass too.
	if err := multipart.NewWriter(io.Discard).SetBoundary(bnd); err != nil {
		return nil, fmt.Errorf("batch %s boundary: %w", opID, err)
	}
	// The frame's exact size but for the manifest's header: each part's
	// header is 74 bytes of text, the boundary, its quoted ID twice and its
	// content type (IDs need no escaping).
	size := len(mb) + 256
	for _, t := range tiles {
		size += 74 + len(bnd) + 2*(len(t.ID)+2) + len(t.ContentType)
	}
	frame := make([]byte, 0, size)
	frame = append(frame, "--"...)
	frame = append(frame, bnd...)
	frame = append(frame, "\r\nContent-Disposition: form-data; name=\"manifest\"\r\nContent-Type: application/json\r\n\r\n"...)
	frame = append(frame, mb...)
	cuts := make([]int, len(tiles))
	for i, t := range tiles {
		frame = append(frame, "\r\n--"...)
		frame = append(frame, bnd...)
		frame = append(frame, "\r\nContent-Disposition: form-data; name="...)
		frame = strconv.AppendQuote(frame, t.ID)
		frame = append(frame, "; filename="...)
		frame = strconv.AppendQuote(frame, t.ID)
		frame = append(frame, "\r\nContent-Type: "...)
		frame = append(frame, t.ContentType...)
		frame = append(frame, "\r\n\r\n"...)
		cuts[i] = len(frame)
	}
	frame = append(frame, "\r\n--"...)
	frame = append(frame, bnd...)
	frame = append(frame, "--\r\n"...)
	b := &batchBody{opID: opID, segs: make([][]byte, 0, 2*len(tiles)+1), length: int64(len(frame)), bytes: tb}
	prev := 0
	for i, cut := range cuts {
		b.segs = append(b.segs, frame[prev:cut], data[i])
		b.length += int64(len(data[i]))
		prev = cut
	}
	b.segs = append(b.segs, frame[prev:])
	return b, nil
}

func boundaryFor(opID string) string {
	// Keys are [A-Za-z0-9_-], all legal boundary characters; 70 is the limit.
	bnd := "tilectl-" + opID
	if len(bnd) > 70 {
		bnd = bnd[:70]
	}
	return bnd
}

func (b *batchBody) contentType() string {
	return "multipart/form-data; boundary=" + boundaryFor(b.opID)
}

// partOverhead over-estimates the multipart framing and manifest entry of
// one tile, so batches formed by estimate never exceed max_batch_bytes.
func partOverhead(t tilestore.Tile) int64 {
	return 420 + 3*int64(len(t.ID)) + int64(len(t.ContentType))*2
}

// bodyOverhead over-estimates the framing around the manifest.
const bodyOverhead = 512

// BodyLimiter paces request bodies (a bandwidth limit). Take waits until
// up to want bytes may be written and returns how many (at least 1, at most
// want); the body writes that many and takes again for the rest. It must
// return ctx's error as soon as ctx is done, and be safe for concurrent use:
// one limiter serves every batch in flight. bwlimit.Limiter implements it.
type BodyLimiter interface {
	Take(ctx context.Context, want int) (int, error)
}

// bodyReader is one attempt's request body: a read over the body's
// segments. Its exact length makes the request carry a Content-Length, so a
// server sees a cut-short body as incomplete, never as a smaller one. It
// holds the arena while open; once closed it refuses to read, so the arena
// can go to another batch (see tileBytes).
type bodyReader struct {
	mu     sync.Mutex
	segs   [][]byte // shared with the batchBody: never written
	i      int      // the segment being read
	off    int      // how far into it
	left   int64
	bytes  *tileBytes
	closed bool
	// pace, when set, is asked before each read, with ctx (the request's:
	// its deadline cuts a wait).
	pace BodyLimiter
	ctx  context.Context
}

// errBodyClosed is a read of a batch body after net/http closed it.
var errBodyClosed = errors.New("read of a batch body after it was closed")

func (b *batchBody) reader() *bodyReader {
	b.bytes.acquire()
	return &bodyReader{segs: b.segs, left: b.length, bytes: b.bytes}
}

// paced is reader paced by pace (nil: not paced); ctx bounds its waits.
func (b *batchBody) paced(ctx context.Context, pace BodyLimiter) *bodyReader {
	r := b.reader()
	r.pace, r.ctx = pace, ctx
	return r
}

func (r *bodyReader) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int(r.left)
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.pace != nil && len(p) > 0 {
		// The wait is outside the lock, so a Close while it waits does
		// not wait for it.
		r.mu.Lock()
		want := int(min(int64(len(p)), r.left))
		r.mu.Unlock()
		if want > 0 {
			n, err := r.pace.Take(r.ctx, want)
			if err != nil {
				return 0, fmt.Errorf("wait for the bandwidth limit: %w", err)
			}
			p = p[:n]
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errBodyClosed
	}
	n := 0
	for n < len(p) && r.i < len(r.segs) {
		c := copy(p[n:], r.segs[r.i][r.off:])
		n += c
		r.off += c
		if r.off == len(r.segs[r.i]) {
			r.i, r.off = r.i+1, 0
		}
	}
	r.left -= int64(n)
	if n == 0 && len(p) > 0 && r.i == len(r.segs) {
		return 0, io.EOF
	}
	return n, nil
}

// Close lets the arena go once every reader and the batch's owner have;
// a second Close does nothing.
func (r *bodyReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.segs = nil
		r.bytes.release()
	}
	return nil
}
