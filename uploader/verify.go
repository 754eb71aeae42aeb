package uploader

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
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
// sha256; a *MachineError when this machine cannot check any blob now. It
// streams the hash: verify and import use it on blobs of any size.
func CheckBlob(blobs BlobSource, t tilestore.Tile, depth CheckDepth) (*LocalFailure, error) {
	f, lf, err := openBlob(blobs, t)
	if f == nil {
		return lf, err
	}
	defer f.Close()
	if depth < CheckSHA256 {
		return nil, nil
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return blobFailure(blobs, t, ProblemBlobUnreadable, "read: "+err.Error()), nil
	}
	if n != t.SizeBytes {
		return blobFailure(blobs, t, ProblemBlobWrongSize, fmt.Sprintf("read %d bytes, the tile's metadata says %d", n, t.SizeBytes)), nil
	}
	return hashFailure(blobs, t, h.Sum(nil)), nil
}

// openBlob opens a tile's blob and checks that it is a regular file of the
// recorded size. On any problem it returns a nil file and the
// LocalFailure or *MachineError; otherwise the caller closes the file.
func openBlob(blobs BlobSource, t tilestore.Tile) (*os.File, *LocalFailure, error) {
	f, err := blobs.Open(t.BlobPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, blobFailure(blobs, t, ProblemBlobMissing, "no file at the tile's cache path"), nil
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE), errors.Is(err, syscall.ENOMEM):
		return nil, nil, &MachineError{TileID: t.ID, Err: err}
	case err != nil:
		return nil, blobFailure(blobs, t, ProblemBlobUnreadable, "open: "+err.Error()), nil
	}
	st, err := f.Stat()
	var lf *LocalFailure
	switch {
	case err != nil:
		lf = blobFailure(blobs, t, ProblemBlobUnreadable, "stat: "+err.Error())
	case !st.Mode().IsRegular():
		lf = blobFailure(blobs, t, ProblemBlobUnreadable, "not a regular file")
	case st.Size() != t.SizeBytes:
		lf = blobFailure(blobs, t, ProblemBlobWrongSize, fmt.Sprintf("the file is %d bytes, the tile's metadata says %d", st.Size(), t.SizeBytes))
	}
	if lf != nil {
		f.Close()
		return nil, lf, nil
	}
	return f, nil, nil
}

func blobFailure(blobs BlobSource, t tilestore.Tile, problem, msg string) *LocalFailure {
	return &LocalFailure{TileID: t.ID, CachePath: cachePath(blobs, t.BlobPath), Problem: problem, Message: msg}
}

// hashFailure compares a blob's sha256 with the metadata's.
func hashFailure(blobs BlobSource, t tilestore.Tile, sum []byte) *LocalFailure {
	var want [sha256.Size]byte
	if len(t.SHA256) != 2*sha256.Size {
		return blobFailure(blobs, t, ProblemBlobWrongHash, fmt.Sprintf("the tile's metadata sha256 %q is not 64 hex digits", clipHash(t.SHA256)))
	}
	if _, err := hex.Decode(want[:], []byte(t.SHA256)); err != nil || !bytes.Equal(sum, want[:]) {
		return blobFailure(blobs, t, ProblemBlobWrongHash,
			fmt.Sprintf("the file's sha256 is %s, the tile's metadata says %s", hex.EncodeToString(sum), t.SHA256))
	}
	return nil
}

// readBlob reads a tile's file into dst (len(dst) == t.SizeBytes) and
// checks it as CheckBlob with CheckSHA256 does. It returns nil, nil when
// dst holds the tile's bytes and the tile may be sent. This one read is the
// only one: the body is written from dst, so the bytes that were hashed
// are the bytes that are sent, and a resend sends them again. A source
// that can read a blob of a known size itself (tilestore.BlobStore) does,
// without an *os.File; when it cannot (a missing file, another size, a
// symlink), the file is opened, and openBlob says what is wrong.
func readBlob(blobs BlobSource, t tilestore.Tile, dst []byte) (*LocalFailure, error) {
	if r, ok := blobs.(exactReader); ok && r.ReadExactly(t.BlobPath, dst) {
		sum := sha256.Sum256(dst)
		return hashFailure(blobs, t, sum[:]), nil
	}
	f, lf, err := openBlob(blobs, t)
	if f == nil {
		return lf, err
	}
	defer f.Close()
	// A file that shrank since the Stat ends short; one that grew does not
	// matter: dst holds exactly the bytes hashed below, and only they are
	// sent.
	n, err := io.ReadFull(f, dst)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || (errors.Is(err, io.EOF) && len(dst) > 0):
		return blobFailure(blobs, t, ProblemBlobWrongSize, fmt.Sprintf("read %d bytes, the tile's metadata says %d", n, t.SizeBytes)), nil
	case err != nil:
		return blobFailure(blobs, t, ProblemBlobUnreadable, "read: "+err.Error()), nil
	}
	sum := sha256.Sum256(dst)
	return hashFailure(blobs, t, sum[:]), nil
}

// exactReader is a BlobSource that reads a blob of a known size into a
// buffer itself (tilestore.BlobStore.ReadExactly); false sends the reader
// to Open.
type exactReader interface {
	ReadExactly(rel string, dst []byte) bool
}

// The production source takes the fast path: a rename would otherwise
// turn it off silently, every read then going through Open.
var _ exactReader = (*tilestore.BlobStore)(nil)

func clipHash(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
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
