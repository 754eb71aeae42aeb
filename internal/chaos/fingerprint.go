package chaos

import (
	"crypto/sha256"
	"encoding/hex"
)

// fingerprintFor computes, independently of tilectl and the provider, the
// fingerprint docs/provider-api.md defines for a batch: the flight, then each
// tile's tile_id and sha256 in manifest order (NUL-separated, sha256, hex;
// the encoding the reference provider uses). Comparing it with both sides'
// records proves an op ID stood for exactly the members tilectl journaled.
func fingerprintFor(flightID string, b clientBatch) string {
	h := sha256.New()
	h.Write([]byte(flightID))
	for i := range b.TileIDs {
		h.Write([]byte{0})
		h.Write([]byte(b.TileIDs[i]))
		h.Write([]byte{0})
		if i < len(b.SHA256s) {
			h.Write([]byte(b.SHA256s[i]))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
