package uploader

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/tilectl/tilectl/tilestore"
)

// localRejection is a tile the client will not send, with the reason it
// records for the retry decorator to count.
type localRejection struct {
	tile    tilestore.Tile
	reason  string
	message string
}

// verifyBlob checks a tile's file against its metadata: present, the
// recorded size, the recorded sha256. It returns nil when the tile may be
// sent, else the local rejection.
func verifyBlob(blobs BlobSource, t tilestore.Tile) *localRejection {
	f, err := blobs.Open(t.BlobPath)
	if err != nil {
		msg := "blob file is missing"
		if !errors.Is(err, fs.ErrNotExist) {
			msg = "blob file cannot be opened: " + err.Error()
		}
		return &localRejection{tile: t, reason: ReasonBlobMissing, message: msg}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return &localRejection{tile: t, reason: ReasonBlobMissing, message: "stat blob: " + err.Error()}
	}
	if st.Size() != t.SizeBytes {
		return &localRejection{tile: t, reason: ReasonBlobCorrupt,
			message: fmt.Sprintf("blob is %d bytes, metadata says %d", st.Size(), t.SizeBytes)}
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return &localRejection{tile: t, reason: ReasonBlobCorrupt, message: "read blob: " + err.Error()}
	}
	if n != t.SizeBytes {
		return &localRejection{tile: t, reason: ReasonBlobCorrupt,
			message: fmt.Sprintf("read %d bytes of blob, metadata says %d", n, t.SizeBytes)}
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, t.SHA256) {
		return &localRejection{tile: t, reason: ReasonBlobCorrupt,
			message: fmt.Sprintf("blob sha256 %s does not match metadata %s", got[:12], clipHash(t.SHA256))}
	}
	return nil
}

func clipHash(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
