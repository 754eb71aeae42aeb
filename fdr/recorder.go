package fdr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Entry is what a caller records.
type Entry struct {
	Kind string // required, e.g. "upload.giveup"
	// Key, when set, makes the append idempotent: if a record with this Key
	// is still in the ring, Append returns it and writes nothing.
	Key     string
	Payload any // marshalled with encoding/json
	// Durable makes Append return only once the record is on disk.
	Durable bool
}

// Record is one record read back from the ring.
type Record struct {
	Seq     uint64
	Kind    string
	Key     string
	Time    time.Time
	Payload json.RawMessage
}

// Options configure Open. Every field has a usable zero value.
type Options struct {
	// Capacity is the record area in bytes, fixed when the file is created.
	// Default: DefaultCapacity (4 MiB); MinCapacity..MaxCapacity. An
	// existing file keeps its own capacity; a different non-zero value here
	// is reported through Logf.
	Capacity int64
	// Now is the clock stamped on records. Default: time.Now.
	Now func() time.Time
	// Logf receives diagnostics (a capacity mismatch, a header rebuilt
	// after damage). Default: discard.
	Logf func(format string, args ...any)
}

// Recorder appends records to a ring file. It is safe for concurrent use
// by goroutines, and other Recorders (in this or other processes) may
// append to the same file at the same time.
type Recorder struct {
	// sem is the in-process write lock (a channel, so a wait can end with
	// its context); the file's flock orders writers across processes.
	sem  chan struct{}
	f    *os.File
	path string
	now  func() time.Time
	logf func(string, ...any)
	cap  uint64
	buf  []byte // frame scratch, reused under mu
	// mem maps the whole file (MAP_SHARED): appends are a copy into the
	// page cache plus two flock calls, which is what makes them cheap.
	mem  []byte
	sync func(*os.File) error

	// keys indexes keyed records by Key. It is exact as of seenNext, the
	// header's nextSeq after this Recorder's last append or rebuild; when
	// the file's nextSeq differs, another writer appended and the index is
	// rebuilt from the file before it is trusted.
	keys     map[string]keyLoc
	seenNext uint64
	seenOff  uint64 // the header's writeOff at seenNext
	closed   bool
}

type keyLoc struct {
	seq uint64
	off uint64
}

// Open opens the ring at path, creating it (mode 0600, parent directories
// 0700) with the given capacity if it does not exist. It waits for the
// ring's lock (held by another process's append) only as long as ctx
// allows.
func Open(ctx context.Context, path string, opts Options) (*Recorder, error) {
	if opts.Capacity != 0 && (opts.Capacity < MinCapacity || opts.Capacity > MaxCapacity) {
		return nil, fmt.Errorf("open fdr %s: capacity %d, want %d..%d", path, opts.Capacity, MinCapacity, MaxCapacity)
	}
	want := uint64(DefaultCapacity)
	if opts.Capacity != 0 {
		want = uint64(opts.Capacity)
	}
	r := &Recorder{path: path, now: opts.Now, logf: opts.Logf, keys: map[string]keyLoc{}, sync: syncData, sem: make(chan struct{}, 1)}
	if r.now == nil {
		r.now = time.Now
	}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open fdr %s: create directory: %w", path, err)
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open fdr %s: %w", path, err)
	}
	if os.IsNotExist(statErr) {
		// A new file's name is durable only once its directory is synced:
		// without it a power loss could take the whole ring, with the
		// give-up records the database already committed.
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, fmt.Errorf("open fdr %s: sync directory: %w", path, err)
		}
	}
	r.f = f
	if err := r.init(ctx, want, opts.Capacity != 0); err != nil {
		unmapFile(r.mem)
		f.Close()
		return nil, fmt.Errorf("open fdr %s: %w", path, err)
	}
	return r, nil
}

// init creates the header of a new file, or adopts an existing one, and
// maps the file.
func (r *Recorder) init(ctx context.Context, want uint64, explicit bool) error {
	unlock, err := lockFile(ctx, r.f, true)
	if err != nil {
		return err
	}
	defer unlock()
	var b [headerLen]byte
	m, err := r.f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read header: %w", err)
	}
	fresh := allZero(b[:m])
	if fresh {
		r.cap = want
	} else {
		h, err := decodeHeader(b[:m])
		switch {
		case errors.Is(err, errBadHeader):
			r.cap = r.fileCapacity() // loadHeader below rebuilds it
		case err != nil:
			return err
		default:
			r.cap = h.capacity
		}
		if explicit && r.cap != want {
			r.logf("fdr %s: file capacity %d bytes kept; the configured %d applies only to a new file", r.path, r.cap, want)
		}
	}
	// Size a new file; regrow one cut short (a copy, a crash while it was
	// created) so every offset below capacity is mapped to real pages.
	if st, err := r.f.Stat(); err != nil {
		return fmt.Errorf("stat ring: %w", err)
	} else if fresh || st.Size() < int64(HeaderSize+r.cap) {
		if err := r.f.Truncate(int64(HeaderSize + r.cap)); err != nil {
			return fmt.Errorf("size ring: %w", err)
		}
	}
	// Every page backed before the first write through the map: a full
	// disk is this error, not a bus error mid-record.
	if err := allocate(r.f, int64(HeaderSize+r.cap)); err != nil {
		return fmt.Errorf("allocate the ring's %d bytes on disk: %w", HeaderSize+r.cap, err)
	}
	if r.mem, err = mapFile(r.f, HeaderSize+int(r.cap)); err != nil {
		return fmt.Errorf("map ring: %w", err)
	}
	if fresh {
		r.writeHeader(header{capacity: r.cap, nextSeq: 1, created: r.now().UnixNano()})
		if err := r.sync(r.f); err != nil {
			return fmt.Errorf("sync new ring: %w", err)
		}
	}
	h, err := r.loadHeader()
	if err != nil {
		return err
	}
	r.rebuildIndex(h)
	return nil
}

// Capacity is the ring's record area in bytes, as fixed in its header.
func (r *Recorder) Capacity() int64 { return int64(r.cap) }

// Path is the ring file's path.
func (r *Recorder) Path() string { return r.path }

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("fdr: recorder closed")

// Close closes the file. Records already appended stay; a non-durable
// record may still be only in the page cache, where the OS writes it out
// even if this process exits.
func (r *Recorder) Close() error {
	r.sem <- struct{}{}
	defer func() { <-r.sem }()
	if r.closed {
		return nil
	}
	r.closed = true
	err := unmapFile(r.mem)
	r.mem = nil
	return errors.Join(err, r.f.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
