package uploader

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// The batch body's framing is written by hand for speed; it must stay byte
// for byte what multipart.Writer writes for the same parts, so a resend by
// any version of this client, and any multipart parser, sees the same body.
func TestBatchFramingIsMultipartWriters(t *testing.T) {
	for _, c := range []struct {
		name, opID string
		ids        []string
		types      []string
	}{
		{"one tile", "op-1", []string{"t1"}, []string{"image/png"}},
		{"several tiles", "0190f5a2-7c1e-7d3b-9a55-3f1e2d4c5b6a", []string{"F1-t000001", "F1-t000002", "a.b_c-d"},
			[]string{"image/png", "image/jpeg", "image/webp"}},
		{"long op ID cut at 70", "k" + string(bytes.Repeat([]byte("x"), 90)), []string{"z"}, []string{"image/png"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tiles := make([]tilestore.Tile, len(c.ids))
			tb := &tileBytes{}
			for i, id := range c.ids {
				tiles[i] = tilestore.Tile{ID: id, Z: 3, X: 1, Y: 2, ContentType: c.types[i], SizeBytes: int64(i + 2),
					SHA256: fmt.Sprintf("%064d", i), CapturedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
				tb.data = append(tb.data, bytes.Repeat([]byte{byte('A' + i)}, i+2))
			}
			body, err := newBatchBody(c.opID, tiles, tb)
			if err != nil {
				t.Fatal(err)
			}
			r := body.reader()
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(got)) != body.length {
				t.Errorf("read %d bytes, the body says it is %d", len(got), body.length)
			}
			want := writerBody(t, c.opID, tiles, tb.data)
			if !bytes.Equal(got, want) {
				t.Errorf("body differs from multipart.Writer's:\n got %q\nwant %q", got, want)
			}
		})
	}
}

// writerBody is the body as multipart.Writer writes it.
func writerBody(t *testing.T, opID string, tiles []tilestore.Tile, data [][]byte) []byte {
	t.Helper()
	m := manifest{Tiles: make([]manifestTile, len(tiles))}
	for i, tl := range tiles {
		m.Tiles[i] = manifestEntry(tl)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.SetBoundary(boundaryFor(opID)); err != nil {
		t.Fatal(err)
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="manifest"`)
	h.Set("Content-Type", "application/json")
	p, err := mw.CreatePart(h)
	if err != nil {
		t.Fatal(err)
	}
	p.Write(mb)
	for i, tl := range tiles {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, tl.ID, tl.ID))
		h.Set("Content-Type", tl.ContentType)
		p, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		p.Write(data[i])
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The multipart frame of a batch is sized before it is written, so it is
// allocated once: its capacity exceeds its length by no more than the
// estimate's slack, also with long tile IDs (flight-z-x-y).
func TestABatchFrameIsAllocatedOnce(t *testing.T) {
	tiles := make([]tilestore.Tile, 256)
	tb := &tileBytes{}
	var data int
	for i := range tiles {
		tiles[i] = tilestore.Tile{ID: fmt.Sprintf("flight-2026-05-01-18-%06d-%06d", i, i), Z: 18, ContentType: "image/png",
			SizeBytes: 3, SHA256: fmt.Sprintf("%064d", i), CapturedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
		tb.data = append(tb.data, []byte("abc"))
		data += 3
	}
	body, err := newBatchBody("0190f5a2-7c1e-7d3b-9a55-3f1e2d4c5b6a", tiles, tb)
	if err != nil {
		t.Fatal(err)
	}
	frame := int(body.length) - data
	if c := cap(body.segs[0]); c < frame || c-frame > 256 {
		t.Fatalf("frame of %d bytes in a buffer of capacity %d: it was grown after its estimate", frame, c)
	}
}
