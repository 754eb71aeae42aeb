package uploader

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// manifestTile is one entry of the manifest part (provider-api.md).
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

// errBlobChanged aborts a request whose tile bytes no longer match what was
// verified and journaled: the provider must never get a complete body with
// other bytes under this key.
var errBlobChanged = errors.New("tile bytes changed on disk while sending")

// batchBody writes one batch's multipart body. The boundary is derived from
// the operation ID so every resend is byte-for-byte the same body.
type batchBody struct {
	opID     string
	manifest []byte
	tiles    []tilestore.Tile
	blobs    BlobSource
	length   int64
}

func newBatchBody(opID string, tiles []tilestore.Tile, blobs BlobSource) (*batchBody, error) {
	m := manifest{Tiles: make([]manifestTile, len(tiles))}
	for i, t := range tiles {
		m.Tiles[i] = manifestEntry(t)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest of batch %s: %w", opID, err)
	}
	b := &batchBody{opID: opID, manifest: mb, tiles: tiles, blobs: blobs}
	var cw countingWriter
	if err := b.write(&cw, func(_ io.Writer, t tilestore.Tile) error { cw.n += t.SizeBytes; return nil }); err != nil {
		return nil, err
	}
	b.length = cw.n
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

func (b *batchBody) write(w io.Writer, content func(io.Writer, tilestore.Tile) error) error {
	mw := multipart.NewWriter(w)
	if err := mw.SetBoundary(boundaryFor(b.opID)); err != nil {
		return fmt.Errorf("batch %s boundary: %w", b.opID, err)
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="manifest"`)
	h.Set("Content-Type", "application/json")
	p, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := p.Write(b.manifest); err != nil {
		return err
	}
	for _, t := range b.tiles {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, t.ID, t.ID))
		h.Set("Content-Type", t.ContentType)
		p, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if err := content(p, t); err != nil {
			return err
		}
	}
	return mw.Close()
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// partOverhead over-estimates the multipart framing and manifest entry of
// one tile, so batches formed by estimate never exceed max_batch_bytes.
func partOverhead(t tilestore.Tile) int64 {
	return 420 + 3*int64(len(t.ID)) + int64(len(t.ContentType))*2
}

// bodyOverhead over-estimates the framing around the manifest.
const bodyOverhead = 512

var tileBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// streamTile copies a tile's bytes into the part only after they are read
// whole and checked against the journaled size and sha256, so changed bytes
// never reach the wire. Tiles are at most max_tile_bytes, so one buffer per
// sending worker is the memory cost.
func (b *batchBody) streamTile(part io.Writer, t tilestore.Tile) error {
	f, err := b.blobs.Open(t.BlobPath)
	if err != nil {
		return fmt.Errorf("open blob of tile %s: %w", t.ID, errBlobChanged)
	}
	defer f.Close()
	buf := tileBufs.Get().(*bytes.Buffer)
	defer tileBufs.Put(buf)
	buf.Reset()
	// One byte more than expected reveals a file that grew.
	if _, err := io.Copy(buf, io.LimitReader(f, t.SizeBytes+1)); err != nil {
		return fmt.Errorf("read blob of tile %s: %w", t.ID, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if int64(buf.Len()) != t.SizeBytes || !strings.EqualFold(hex.EncodeToString(sum[:]), t.SHA256) {
		return fmt.Errorf("tile %s: %w", t.ID, errBlobChanged)
	}
	_, err = part.Write(buf.Bytes())
	return err
}

// lazyBody is one attempt's request body. It starts streaming on the first
// Read (retryablehttp opens a body once just to learn its length) and
// reports its exact length so the request carries a Content-Length: a
// server then sees a cut-short body as incomplete, never as a smaller one.
type lazyBody struct {
	b       *batchBody
	onAbort func(error)
	once    sync.Once
	pr      *io.PipeReader
}

func (l *lazyBody) Len() int { return int(l.b.length) }

func (l *lazyBody) start() {
	pr, pw := io.Pipe()
	l.pr = pr
	go func() {
		err := l.b.write(pw, l.b.streamTile)
		if err != nil && l.onAbort != nil && errors.Is(err, errBlobChanged) {
			l.onAbort(err)
		}
		pw.CloseWithError(err) // nil closes cleanly
	}()
}

func (l *lazyBody) Read(p []byte) (int, error) {
	l.once.Do(l.start)
	return l.pr.Read(p)
}

func (l *lazyBody) Close() error {
	l.once.Do(func() {}) // a body closed before any Read never starts
	if l.pr != nil {
		return l.pr.Close()
	}
	return nil
}
