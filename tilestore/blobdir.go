package tilestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// BlobDir is one directory of the cache opened once to write many new
// blobs into it (tiles import writes a flight's z/x column of tiles): each
// blob then costs a create and its writes in that directory, where Put
// walks from the cache root, component by component, and renames, per
// blob. Like PutDeferred's, its blobs are durable only after the
// BlobStore's next Sync. Safe for concurrent use.
type BlobDir struct {
	store *BlobStore
	rel   string   // slash-separated, relative to the cache root
	dir   *os.Root // the directory itself: opens are confined to it
}

// OpenDir opens the directory rel of the cache (creating it and its
// parents, mode 0700) for writing blobs into. Like Put, it refuses a path
// or a symlink that leads out of the cache (ErrPathEscapesRoot).
func (b *BlobStore) OpenDir(rel string) (*BlobDir, error) {
	local, err := b.localPath(rel)
	if err != nil {
		return nil, err
	}
	if err := b.dir.MkdirAll(local, 0o700); err == nil {
		if d, err := b.dir.OpenRoot(local); err == nil {
			return &BlobDir{store: b, rel: filepath.ToSlash(local), dir: d}, nil
		}
	}
	// os.Root refused (an escape, or an absolute symlink that points back
	// inside): Resolve decides, as Put's fallback does.
	p, err := b.Resolve(rel)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(p, 0o700); err != nil {
		return nil, fmt.Errorf("open blob directory %s: %w", rel, err)
	}
	// A symlink could have appeared while the directories were made.
	if again, err := b.Resolve(rel); err != nil || again != p {
		if err == nil {
			err = fmt.Errorf("blob path %q changed while it was being created: %w", clip(rel), ErrPathEscapesRoot)
		}
		return nil, err
	}
	d, err := os.OpenRoot(p)
	if err != nil {
		return nil, fmt.Errorf("open blob directory %s: %w", rel, err)
	}
	return &BlobDir{store: b, rel: filepath.ToSlash(local), dir: d}, nil
}

// Close releases the directory.
func (d *BlobDir) Close() error { return d.dir.Close() }

// Create starts the blob name (one path element) in the directory, mode
// 0600; the caller writes its bytes, then calls Commit or Abort. It is for
// blobs no tile row points at yet (tiles import records a chunk's tiles
// only after their blobs are written and synced): a blob that does not
// exist is written in place, which spares a rename, since no reader looks
// for it and a crash leaves at worst a partial file that the next import
// replaces. A blob that exists is written to a temporary file and renamed
// over it, so that a reader sees the old bytes or the new.
func (d *BlobDir) Create(name string) (*NewBlob, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return nil, fmt.Errorf("blob name %q is not one path element: %w", clip(name), ErrPathEscapesRoot)
	}
	// O_EXCL: an existing name, a symlink included, is never opened.
	f, err := d.dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return &NewBlob{d: d, name: name, f: f}, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("put blob %s: %w", path.Join(d.rel, name), err)
	}
	f, tmp, err := createTemp(d.dir, ".")
	if err != nil {
		return nil, fmt.Errorf("put blob %s: %w", path.Join(d.rel, name), err)
	}
	return &NewBlob{d: d, name: name, tmp: tmp, f: f}, nil
}

// NewBlob is a blob being written: Write its bytes, then Commit or Abort.
type NewBlob struct {
	d    *BlobDir
	name string
	tmp  string // the temporary file, "" when written in place
	f    *os.File
}

// Write writes the blob's next bytes.
func (n *NewBlob) Write(p []byte) (int, error) { return n.f.Write(p) }

// Commit closes the blob's file and, when it is a temporary one, renames
// it to the blob's name (no fsync: the blob is durable after the
// BlobStore's next Sync). A symlink at the blob's name is never replaced
// here: the blob then goes through PutDeferred, which refuses it if it
// leaves the cache, as Put always has.
func (n *NewBlob) Commit() error {
	rel := path.Join(n.d.rel, n.name)
	if err := n.f.Close(); err != nil {
		n.remove()
		return fmt.Errorf("put blob %s: close: %w", rel, err)
	}
	if n.tmp == "" {
		return nil
	}
	if st, err := n.d.dir.Lstat(n.name); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		return n.putThroughStore(rel)
	}
	if err := n.d.dir.Rename(n.tmp, n.name); err != nil {
		_ = n.d.dir.Remove(n.tmp)
		return fmt.Errorf("put blob %s: rename: %w", rel, err)
	}
	return nil
}

// putThroughStore writes the temporary file's bytes with PutDeferred, then
// removes it.
func (n *NewBlob) putThroughStore(rel string) error {
	defer func() { _ = n.d.dir.Remove(n.tmp) }()
	f, err := n.d.dir.Open(n.tmp)
	if err != nil {
		return fmt.Errorf("put blob %s: %w", rel, err)
	}
	defer f.Close()
	_, _, err = n.d.store.PutDeferred(rel, f)
	return err
}

// Abort closes and removes what Create made: the blob is left as it was
// (absent, when it was written in place).
func (n *NewBlob) Abort() {
	_ = n.f.Close()
	n.remove()
}

func (n *NewBlob) remove() {
	if n.tmp == "" {
		_ = n.d.dir.Remove(n.name)
		return
	}
	_ = n.d.dir.Remove(n.tmp)
}

// CheckWritable makes sure a blob can be written into the directory rel of
// the cache (creating it and its parents, as OpenDir does): it creates and
// removes a probe file there. An import calls it before it records
// anything, so that a cache it cannot write fails it with nothing left
// behind.
func (b *BlobStore) CheckWritable(rel string) error {
	d, err := b.OpenDir(rel)
	if err != nil {
		return err
	}
	defer d.Close()
	name := fmt.Sprintf(".tilectl-write-check-%d", os.Getpid())
	f, err := d.dir.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create a file in blob directory %s: %w", rel, err)
	}
	f.Close()
	if err := d.dir.Remove(name); err != nil {
		return fmt.Errorf("remove the probe file from blob directory %s: %w", rel, err)
	}
	return nil
}
