package uploader

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"

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

// readBlob reads a tile's file into dst (len(dst) == t.SizeBytes) and
// checks it against the metadata: present, the recorded size, the recorded
// sha256. It returns nil when dst holds the tile's bytes and the tile may
// be sent, else the local rejection. This one read is the only one: the
// body is written from dst, so the bytes that were hashed are the bytes
// that are sent, and a resend sends them again.
func readBlob(blobs BlobSource, t tilestore.Tile, dst []byte) *localRejection {
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
	// A file that shrank since the Stat ends short; one that grew does not
	// matter: dst holds exactly the bytes hashed below, and only they are
	// sent.
	n, err := io.ReadFull(f, dst)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || (errors.Is(err, io.EOF) && len(dst) > 0):
		return &localRejection{tile: t, reason: ReasonBlobCorrupt,
			message: fmt.Sprintf("read %d bytes of blob, metadata says %d", n, t.SizeBytes)}
	case err != nil:
		return &localRejection{tile: t, reason: ReasonBlobCorrupt, message: "read blob: " + err.Error()}
	}
	sum := sha256.Sum256(dst)
	var want [sha256.Size]byte
	if len(t.SHA256) != 2*sha256.Size {
		return &localRejection{tile: t, reason: ReasonBlobCorrupt,
			message: fmt.Sprintf("metadata sha256 %q is not 64 hex digits", clipHash(t.SHA256))}
	}
	if _, err := hex.Decode(want[:], []byte(t.SHA256)); err != nil || sum != want {
		return &localRejection{tile: t, reason: ReasonBlobCorrupt,
			message: fmt.Sprintf("blob sha256 %s does not match metadata %s", hex.EncodeToString(sum[:6]), clipHash(t.SHA256))}
	}
	return nil
}

// tileBytes holds the verified bytes of one batch's tiles, read once into
// one allocation sized from the metadata (tiles are at most the provider's
// max_tile_bytes, batches at most its max_batch_bytes). It is not pooled:
// net/http may still read a request body after Do returns, and a buffer
// reused by the next batch could then put other bytes into a body.
type tileBytes struct {
	arena []byte
	off   int
	data  [][]byte // the bytes of each tile read so far, in order
}

func newTileBytes(tiles []tilestore.Tile) *tileBytes {
	var total int64
	for _, t := range tiles {
		total += max(t.SizeBytes, 0)
	}
	return &tileBytes{arena: make([]byte, total), data: make([][]byte, 0, len(tiles))}
}

// read reads and checks t's blob (see readBlob); on success its bytes are
// appended to data.
func (tb *tileBytes) read(blobs BlobSource, t tilestore.Tile) *localRejection {
	if t.SizeBytes < 0 || int64(len(tb.arena)-tb.off) < t.SizeBytes {
		return &localRejection{tile: t, reason: ReasonBlobCorrupt, message: fmt.Sprintf("metadata size %d is not usable", t.SizeBytes)}
	}
	dst := tb.arena[tb.off : tb.off+int(t.SizeBytes) : tb.off+int(t.SizeBytes)]
	if r := readBlob(blobs, t, dst); r != nil {
		return r
	}
	tb.off += len(dst)
	tb.data = append(tb.data, dst)
	return nil
}

func clipHash(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
