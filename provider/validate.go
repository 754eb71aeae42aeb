package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// judge decides a tile's fate before storing: a rejection, or the zero
// result when it may be stored. Checks run cheapest and most definite
// first.
func (s *Server) judge(mt manifestTile, data []byte) tileResult {
	reject := func(reason, msg string) tileResult {
		return tileResult{TileID: mt.TileID, Status: "rejected", Reason: reason, Message: msg}
	}
	if int64(len(data)) > s.limits.MaxTileBytes || mt.Size > s.limits.MaxTileBytes {
		return reject("too_large", fmt.Sprintf("tile is over max_tile_bytes %d", s.limits.MaxTileBytes))
	}
	if mt.Z < 0 || mt.Z > 24 || mt.X < 0 || mt.Y < 0 || mt.X >= int64(1)<<mt.Z || mt.Y >= int64(1)<<mt.Z {
		return reject("out_of_bounds", fmt.Sprintf("z/x/y %d/%d/%d is outside the tile grid", mt.Z, mt.X, mt.Y))
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != mt.Size || !strings.EqualFold(hex.EncodeToString(sum[:]), mt.SHA256) {
		return reject("checksum_mismatch", "sha256 or size does not match the bytes")
	}
	if s.faults.rejects(mt.TileID) || !isImage(data) {
		return reject("decode_error", "the bytes are not a PNG, JPEG or WebP image")
	}
	if s.faults.busy() {
		return reject("storage_busy", "storage is busy; send the tile again later")
	}
	return tileResult{}
}

var (
	magicPNG  = []byte("\x89PNG\r\n\x1a\n")
	magicJPEG = []byte("\xff\xd8\xff")
)

// isImage recognises PNG, JPEG and WebP by their magic bytes.
func isImage(b []byte) bool {
	return bytes.HasPrefix(b, magicPNG) || bytes.HasPrefix(b, magicJPEG) ||
		(len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP")
}
