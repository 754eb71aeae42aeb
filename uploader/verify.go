package uploader

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"syscall"

	"github.com/tilectl/tilectl/tilestore"
)

// Problems of a tile's cached blob. A tile with one is never sent and never
// counted as an upload attempt: the provider never saw it, and the operator
// mends it by importing the flight's original directory again.
const (
	ProblemBlobMissing    = "blob_missing"      // no file at the tile's cache path
	ProblemBlobUnreadable = "blob_unreadable"   // the file is there but cannot be read
	ProblemBlobWrongSize  = "blob_wrong_size"   // its size differs from the metadata
	ProblemBlobWrongHash  = "blob_wrong_sha256" // same size, other bytes
)

// LocalFailure is a tile that was not sent because of its cached blob. The
// tile stays pending with its attempts unchanged.
type LocalFailure struct {
	TileID    string `json:"tile_id"`
	CachePath string `json:"cache_path"`
	Problem   string `json:"problem"`
	Message   string `json:"message"`
}

// CheckDepth says how much of a blob CheckBlob reads.
type CheckDepth int

const (
	// CheckSize opens the blob and compares its size: cheap enough for a
	// pre-flight over a whole flight.
	CheckSize CheckDepth = iota
	// CheckSHA256 also reads the blob whole and compares its sha256.
	CheckSHA256
)

// MachineError is a blob that could not be checked for a reason of this
// machine's, not of the tile (out of file descriptors, out of memory):
// every other tile would fail the same way, so the run stops.
type MachineError struct {
	TileID string
	Err    error
}

func (e *MachineError) Error() string {
	return fmt.Sprintf("open the blob of tile %s: %v (a problem of this machine, not of the tile: "+
		"fix it and run again; the tile was not counted as rejected)", e.TileID, e.Err)
}

func (e *MachineError) Unwrap() error { return e.Err }

// CheckBlob checks a tile's cached blob against its metadata. It returns
// nil, nil when the tile may be sent; a LocalFailure when the blob is
// missing, unreadable, of the wrong size or (with CheckSHA256) of the wrong
// sha256; a *MachineError when this machine cannot check any blob now.
func CheckBlob(blobs BlobSource, t tilestore.Tile, depth CheckDepth) (*LocalFailure, error) {
	fail := func(problem, msg string) (*LocalFailure, error) {
		return &LocalFailure{TileID: t.ID, CachePath: cachePath(blobs, t.BlobPath), Problem: problem, Message: msg}, nil
	}
	f, err := blobs.Open(t.BlobPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(ProblemBlobMissing, "no file at the tile's cache path")
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE), errors.Is(err, syscall.ENOMEM):
		return nil, &MachineError{TileID: t.ID, Err: err}
	case err != nil:
		return fail(ProblemBlobUnreadable, "open: "+err.Error())
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail(ProblemBlobUnreadable, "stat: "+err.Error())
	}
	if !st.Mode().IsRegular() {
		return fail(ProblemBlobUnreadable, "not a regular file")
	}
	if st.Size() != t.SizeBytes {
		return fail(ProblemBlobWrongSize, fmt.Sprintf("the file is %d bytes, the tile's metadata says %d", st.Size(), t.SizeBytes))
	}
	if depth < CheckSHA256 {
		return nil, nil
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fail(ProblemBlobUnreadable, "read: "+err.Error())
	}
	if n != t.SizeBytes {
		return fail(ProblemBlobWrongSize, fmt.Sprintf("read %d bytes, the tile's metadata says %d", n, t.SizeBytes))
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, t.SHA256) {
		return fail(ProblemBlobWrongHash, fmt.Sprintf("the file's sha256 is %s, the tile's metadata says %s", got, t.SHA256))
	}
	return nil, nil
}

// cachePath is the blob's path on disk when the source can say it, else
// its path relative to the cache.
func cachePath(blobs BlobSource, rel string) string {
	if r, ok := blobs.(interface{ Resolve(string) (string, error) }); ok {
		if p, err := r.Resolve(rel); err == nil {
			return p
		}
	}
	return rel
}
