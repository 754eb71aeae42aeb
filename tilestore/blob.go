package tilestore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrPathEscapesRoot is returned when a blob path would lead outside the
// cache root: absolute, climbing with "..", or through a symlink that
// points outside.
var ErrPathEscapesRoot = errors.New("path escapes the blob cache root")

// BlobStore keeps tile bytes as files under one root directory. Every path
// it is given is relative to the root and is refused if it would resolve
// outside it, so a tile ID or blob path from a crafted import cannot read or
// write anywhere else.
type BlobStore struct {
	root string   // absolute, symlinks resolved
	dir  *os.Root // root, opened once: reads are confined by os.Root
	dirs dirCache
}

// dirCache keeps open the cache directories blobs were read from, so that
// reading a blob costs one open in its directory instead of a walk from
// the root (an open and a close per path component: most of Open's cost
// in a flight's z/x/y layout). A directory is confined like the root: a
// blob that its directory cannot open (a symlink to a sibling directory)
// is opened from the root, as before.
type dirCache struct {
	mu sync.Mutex
	m  map[string]*cachedDir
}

// cachedDir is one open cache directory: as an os.Root for Open, and as a
// plain descriptor (through raw, which holds it open while in use) for
// ReadExactly.
type cachedDir struct {
	root *os.Root
	f    *os.File
	raw  syscall.RawConn
}

func (d *cachedDir) close() {
	d.root.Close() // one still in use is closed once its open returns
	d.f.Close()    // likewise: raw.Control holds the descriptor while it runs
}

// maxCachedDirs bounds the directories the cache holds open (two file
// descriptors each: the os.Root and the plain one); when it is full it
// starts again (a flight is read column by column, so the working
// set is small).
const maxCachedDirs = 64

// in returns the cache directory local (as localPath gives it), opened
// through the root, or nil when it cannot be opened.
func (c *dirCache) in(root *os.Root, local string) *cachedDir {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.m[local]; d != nil {
		return d
	}
	r, err := root.OpenRoot(local)
	if err != nil {
		return nil
	}
	f, err := r.Open(".")
	if err != nil {
		r.Close()
		return nil
	}
	raw, err := f.SyscallConn()
	if err != nil {
		r.Close()
		f.Close()
		return nil
	}
	d := &cachedDir{root: r, f: f, raw: raw}
	if c.m == nil || len(c.m) >= maxCachedDirs {
		for _, old := range c.m {
			old.close()
		}
		c.m = make(map[string]*cachedDir, maxCachedDirs)
	}
	c.m[local] = d
	return d
}

// NewBlobStore uses root as the cache, creating it (mode 0700) if needed.
func NewBlobStore(root string) (*BlobStore, error) {
	if root == "" {
		return nil, errors.New("blob store: root is empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("blob store root %s: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("create blob store root %s: %w", abs, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("blob store root %s: %w", abs, err)
	}
	dir, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("blob store root %s: %w", real, err)
	}
	return &BlobStore{root: real, dir: dir}, nil
}

// Root is the cache's absolute root, symlinks resolved.
func (b *BlobStore) Root() string { return b.root }

// Resolve turns a slash-separated path relative to the root into an
// absolute one, with every symlink in its existing part resolved. It
// returns an error matching ErrPathEscapesRoot if the result is not inside
// the root.
func (b *BlobStore) Resolve(rel string) (string, error) {
	escape := func(why string) error {
		return fmt.Errorf("blob path %q %s: %w", clip(rel), why, ErrPathEscapesRoot)
	}
	local, err := b.localPath(rel)
	if err != nil {
		return "", err
	}
	full := filepath.Join(b.root, local)
	// Resolve symlinks in the longest prefix that exists; the rest will be
	// created as plain directories and files under it.
	existing, rest := full, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("resolve blob path %q: %w", clip(rel), err)
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", escape("goes through a dangling symlink")
		}
		return "", fmt.Errorf("resolve blob path %q: %w", clip(rel), err)
	}
	if !within(b.root, real) {
		return "", escape("goes through a symlink that leaves the root")
	}
	return filepath.Join(real, rest), nil
}

// localPath checks rel's form (not empty, no NUL, relative, no climbing
// out with "..") and returns it in the OS's separators.
func (b *BlobStore) localPath(rel string) (string, error) {
	escape := func(why string) error {
		return fmt.Errorf("blob path %q %s: %w", clip(rel), why, ErrPathEscapesRoot)
	}
	switch {
	case rel == "":
		return "", fmt.Errorf("blob path is empty")
	case strings.ContainsRune(rel, 0):
		return "", escape("contains NUL")
	case strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, `\`) || filepath.IsAbs(rel):
		return "", escape("is absolute")
	}
	local := filepath.FromSlash(rel)
	if !filepath.IsLocal(local) {
		return "", escape("climbs out with ..")
	}
	return local, nil
}

func within(root, p string) bool {
	r, err := filepath.Rel(root, p)
	return err == nil && (r == "." || filepath.IsLocal(r))
}

// createTemp creates a new temporary blob file (mode 0600, a name no file
// had) in the directory dir of root, os.CreateTemp's way but confined to
// root, and returns it with its name under root.
func createTemp(root *os.Root, dir string) (*os.File, string, error) {
	var err error
	for range 100 {
		name := filepath.Join(dir, ".put-"+strconv.FormatUint(rand.Uint64(), 36))
		var f *os.File
		if f, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, fs.ErrExist) {
			return f, name, err
		}
	}
	return nil, "", err
}

// Open opens the blob at rel for reading. The open goes through an
// os.Root on the cache directory, which refuses any path or symlink that
// leads out of it, so it costs one open instead of an Lstat per path
// component (Resolve); Resolve only names why a refused path escapes. The
// uploader reads through ReadExactly and comes here when that declines.
func (b *BlobStore) Open(rel string) (*os.File, error) {
	local, err := b.localPath(rel)
	if err != nil {
		return nil, err
	}
	if dir, name := filepath.Split(local); dir != "" {
		if d := b.dirs.in(b.dir, filepath.Clean(dir)); d != nil {
			if f, err := d.root.Open(name); err == nil {
				return f, nil
			}
		}
	}
	// Not found, or not openable from its directory: from the root, which
	// decides and names the error.
	f, err := b.dir.Open(local)
	if err == nil {
		return f, nil
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("open blob %s: %w", rel, err)
	}
	// os.Root also refuses an absolute symlink that points back inside the
	// cache, and its escape error is not exported: Resolve decides, as it
	// always did (the old path, taken only when os.Root refuses).
	p, rerr := b.Resolve(rel)
	if rerr != nil {
		return nil, rerr
	}
	f, err = os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", rel, err)
	}
	return f, nil
}

// ReadExactly reads the blob at rel into dst when it is a regular file of
// exactly len(dst) bytes, and says whether it did: Open's fast path for a
// reader that knows the blob's size (the uploader). It costs an open in
// the blob's directory (kept open by the cache, opened through the root),
// an fstat, the reads and a close, and no *os.File (Open's file is
// registered with the runtime's poller, which refuses a regular file, and
// carries a cleanup for the garbage collector), which makes it the cheaper
// read of small blobs (BenchmarkBlobRead compares the two). The open never
// follows a symlink (O_NOFOLLOW) and the name is one path element. In
// every other case (no such file,
// another size, a symlink, not a regular file, an error) it returns false
// and dst's contents are undefined: the caller takes Open, which decides,
// and says what is wrong.
func (b *BlobStore) ReadExactly(rel string, dst []byte) bool {
	local, err := b.localPath(rel)
	if err != nil {
		return false
	}
	dir, name := filepath.Split(local)
	if dir == "" || name == "" || name == "." || name == ".." {
		return false
	}
	d := b.dirs.in(b.dir, filepath.Clean(dir))
	if d == nil {
		return false
	}
	ok := false
	if err := d.raw.Control(func(fd uintptr) { ok = readExactlyAt(int(fd), name, dst) }); err != nil {
		return false // the cache closed the directory meanwhile
	}
	return ok
}

// Put writes r to rel atomically: to a temporary file in the same
// directory, fsynced, then renamed over rel, so a reader never sees half a
// blob and a crash leaves the old one or the new one. Files are 0600 and
// created directories 0700. It returns the size and SHA-256 written.
func (b *BlobStore) Put(rel string, r io.Reader) (size int64, sha256hex string, err error) {
	return b.put(rel, r, true)
}

// PutDeferred is Put without the fsyncs: the blob is complete and atomic
// for readers at once, but durable only after the next Sync. Bulk writers
// (tiles import) put many blobs, Sync once, and only then record their
// metadata, so a crash never leaves metadata pointing at a lost blob.
func (b *BlobStore) PutDeferred(rel string, r io.Reader) (size int64, sha256hex string, err error) {
	return b.put(rel, r, false)
}

// Sync makes every blob written under the root durable: one syncfs(2) of
// the cache's filesystem instead of an fsync per file and directory.
func (b *BlobStore) Sync() error {
	if err := syncFS(b.root); err != nil {
		return fmt.Errorf("sync blob cache %s: %w", b.root, err)
	}
	return nil
}

func (b *BlobStore) put(rel string, r io.Reader, durable bool) (size int64, sha256hex string, err error) {
	local, err := b.localPath(rel)
	if err != nil {
		return 0, "", err
	}
	size, sha256hex, refused, err := b.putInRoot(local, rel, r, durable)
	if !refused {
		return size, sha256hex, err
	}
	// os.Root refused the directory or the temporary file before anything
	// was read from r (an escape, or an absolute symlink that points back
	// inside): Resolve decides, as it always did.
	return b.putResolved(rel, r, durable)
}

// putInRoot is put through the os.Root: the directories, the temporary
// file and the rename are all confined to the cache by the kernel-facing
// API, with no Lstat per path component. refused reports an error that
// came before r was read, for put to retry the old way.
func (b *BlobStore) putInRoot(local, rel string, r io.Reader, durable bool) (size int64, sha256hex string, refused bool, err error) {
	// A symlink at the blob's own path would only be replaced by the
	// rename, never followed; still, it is refused like any other way out.
	if st, err := b.dir.Lstat(local); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		return 0, "", true, nil
	}
	dir := filepath.Dir(local)
	if err := b.dir.MkdirAll(dir, 0o700); err != nil {
		return 0, "", true, err
	}
	tmp, tmpName, err := createTemp(b.dir, dir)
	if err != nil {
		return 0, "", true, err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			_ = b.dir.Remove(tmpName)
		}
	}()
	h := sha256.New()
	if size, err = io.Copy(tmp, io.TeeReader(r, h)); err != nil {
		return 0, "", false, fmt.Errorf("put blob %s: write: %w", rel, err)
	}
	if durable {
		if err = tmp.Sync(); err != nil {
			return 0, "", false, fmt.Errorf("put blob %s: sync: %w", rel, err)
		}
	}
	if err = tmp.Close(); err != nil {
		return 0, "", false, fmt.Errorf("put blob %s: close: %w", rel, err)
	}
	if err = b.dir.Rename(tmpName, local); err != nil {
		return 0, "", false, fmt.Errorf("put blob %s: rename: %w", rel, err)
	}
	if durable { // the rename is durable only once its directory is synced
		if d, derr := b.dir.Open(dir); derr == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	return size, hex.EncodeToString(h.Sum(nil)), false, nil
}

// putResolved is put by resolving the path first (Resolve, twice).
func (b *BlobStore) putResolved(rel string, r io.Reader, durable bool) (size int64, sha256hex string, err error) {
	p, err := b.Resolve(rel)
	if err != nil {
		return 0, "", err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, "", fmt.Errorf("put blob %s: %w", rel, err)
	}
	// A symlink could have appeared while the directories were made.
	if again, err := b.Resolve(rel); err != nil || again != p {
		if err == nil {
			err = fmt.Errorf("blob path %q changed while it was being created: %w", clip(rel), ErrPathEscapesRoot)
		}
		return 0, "", err
	}
	tmp, err := os.CreateTemp(dir, ".put-*")
	if err != nil {
		return 0, "", fmt.Errorf("put blob %s: %w", rel, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o600); err != nil {
		return 0, "", fmt.Errorf("put blob %s: %w", rel, err)
	}
	h := sha256.New()
	if size, err = io.Copy(tmp, io.TeeReader(r, h)); err != nil {
		return 0, "", fmt.Errorf("put blob %s: write: %w", rel, err)
	}
	if durable {
		if err = tmp.Sync(); err != nil {
			return 0, "", fmt.Errorf("put blob %s: sync: %w", rel, err)
		}
	}
	if err = tmp.Close(); err != nil {
		return 0, "", fmt.Errorf("put blob %s: close: %w", rel, err)
	}
	if err = os.Rename(tmp.Name(), p); err != nil {
		return 0, "", fmt.Errorf("put blob %s: rename: %w", rel, err)
	}
	// The rename is durable only once its directory is synced.
	if !durable {
		return size, hex.EncodeToString(h.Sum(nil)), nil
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}
