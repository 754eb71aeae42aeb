package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
)

// BatchTile is one tile of a hand-built POST .../tiles:batch body.
type BatchTile struct {
	ID          string
	Z           int
	X, Y        int64
	ContentType string // "" means image/png
	Size        int64
	SHA256      string
	CapturedAt  string // "" means a fixed RFC 3339 time
	Body        io.Reader
}

// WriteBatch writes a tiles:batch multipart body as docs/provider-api.md lays it
// out (a manifest part, then one part per tile in manifest order) and
// returns its Content-Type. Tests and the benchmark's baseline client use
// it to talk to a provider without the uploader's code, on purpose.
func WriteBatch(w io.Writer, tiles []BatchTile) (contentType string, err error) {
	type entry struct {
		TileID      string `json:"tile_id"`
		Z           int    `json:"z"`
		X           int64  `json:"x"`
		Y           int64  `json:"y"`
		ContentType string `json:"content_type"`
		Size        int64  `json:"size"`
		SHA256      string `json:"sha256"`
		CapturedAt  string `json:"captured_at"`
	}
	var m struct {
		Tiles []entry `json:"tiles"`
	}
	for _, t := range tiles {
		e := entry{TileID: t.ID, Z: t.Z, X: t.X, Y: t.Y, ContentType: t.ContentType, Size: t.Size, SHA256: t.SHA256,
			CapturedAt: t.CapturedAt}
		if e.ContentType == "" {
			e.ContentType = "image/png"
		}
		if e.CapturedAt == "" {
			e.CapturedAt = "2026-11-20T10:02:03Z"
		}
		m.Tiles = append(m.Tiles, e)
	}
	mw := multipart.NewWriter(w)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="manifest"`)
	h.Set("Content-Type", "application/json")
	p, err := mw.CreatePart(h)
	if err != nil {
		return "", err
	}
	if err := json.NewEncoder(p).Encode(m); err != nil {
		return "", err
	}
	for _, t := range tiles {
		p, err := mw.CreateFormFile(t.ID, t.ID)
		if err != nil {
			return "", err
		}
		if _, err := io.Copy(p, t.Body); err != nil {
			return "", fmt.Errorf("tile %s: %w", t.ID, err)
		}
	}
	return mw.FormDataContentType(), mw.Close()
}
