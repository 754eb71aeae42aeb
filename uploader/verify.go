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
	// local is set instead when the file could not be checked for a
	// reason of this machine's (permissions, too many open files, a disk
	// error): rejecting the tile would spend one of its attempts on a
	// problem the provider never saw, so the run stops and says so.
	local error
}

// verifyBlob checks a tile's file against its metadata: present, the
// recorded size, the recorded sha256. It returns nil when the tile may be
// sent, else the local rejection.
func verifyBlob(blobs BlobSource, t tilestore.Tile) *localRejection {
	f, err := blobs.Open(t.BlobPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &localRejection{tile: t, reason: ReasonBlobMissing, message: "blob file is missing"}
	case errors.Is(err, tilestore.ErrPathEscapesRoot):
		return &localRejection{tile: t, reason: ReasonBlobCorrupt, message: "blob path leaves the cache: " + err.Error()}
	case err != nil:
		return &localRejection{tile: t, local: fmt.Errorf("open the blob of tile %s: %w "+
			"(a problem of this machine, not of the tile: fix it and run again; the tile was not counted as rejected)", t.ID, err)}
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
