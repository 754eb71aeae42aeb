package tiles

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// readBuffer is a tileReader's buffer: a 16 KiB tile is read in one call.
const readBuffer = 64 << 10

// tileReader reads tile files, reusing one buffer and one hash. It is not
// safe for concurrent use: each worker has its own.
type tileReader struct {
	br   *bufio.Reader
	h    hash.Hash
	sink sink
}

// readWorkers is how many files are read at once: one per core of the
// 2-core development machine, for the hashing. 4 and 8 did not help there
// (BenchmarkImportProcess): creating a file is most of the cost, and the
// creates in one directory take its lock in turn.
const readWorkers = 2

// newTileReaders returns one tileReader per worker.
func newTileReaders() []*tileReader {
	rs := make([]*tileReader, readWorkers)
	for i := range rs {
		rs[i] = &tileReader{br: bufio.NewReaderSize(nil, readBuffer), h: sha256.New()}
	}
	return rs
}

// forEach calls fn for 0..n-1, one worker per reader, and returns the first
// error; a cancelled ctx stops it before the next call.
func forEach(ctx context.Context, n int, readers []*tileReader, fn func(r *tileReader, i int) error) error {
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range readers[:min(len(readers), n)] {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				if err := fn(r, i); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// fileCopy is what reading a whole tile file found.
type fileCopy struct {
	Size    int64
	SHA256  string
	ModTime time.Time
}

// check opens c's file and checks that it is a regular, non-empty file
// whose first bytes are an image of c's type and that it can be read to
// its end, without hashing it. reason says what is wrong ("" when nothing
// is).
func (r *tileReader) check(c candidate) (size int64, reason string) {
	got, reason, _ := r.read(c, false, nil)
	return got.Size, reason
}

// copy reads c's whole file once: it checks it as check does, hashes it,
// and writes every byte to dst (when not nil) as it is read, so the bytes
// hashed are the bytes written. reason says why the file is not a valid
// tile (dst then holds part of it); err is dst's write error.
func (r *tileReader) copy(c candidate, dst io.Writer) (got fileCopy, reason string, err error) {
	return r.read(c, true, dst)
}

func (r *tileReader) read(c candidate, whole bool, dst io.Writer) (fileCopy, string, error) {
	f, err := openTile(c.Path)
	if err != nil {
		return fileCopy{}, "unreadable: " + errText(err), nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileCopy{}, "unreadable: " + errText(err), nil
	}
	if !st.Mode().IsRegular() {
		return fileCopy{}, "not a regular file", nil
	}
	var src io.Reader = f
	r.sink = sink{}
	if whole {
		r.h.Reset()
		r.sink = sink{h: r.h, dst: dst}
		// Below the buffer: every byte read from the file is hashed and
		// written exactly once, whatever the image decoder reads ahead.
		src = io.TeeReader(f, &r.sink)
	}
	r.br.Reset(src)
	defer r.br.Reset(nil) // drop the file
	head, _ := r.br.Peek(512)
	if r.sink.err != nil {
		return fileCopy{}, "", r.sink.err
	}
	if len(head) == 0 {
		return fileCopy{}, "file is empty", nil
	}
	reason := checkImage(c.Ext, head, r.br)
	if r.sink.err != nil {
		return fileCopy{}, "", r.sink.err
	}
	if reason != "" {
		return fileCopy{}, reason, nil
	}
	// To the end, also when only checking: a file that cannot be read
	// whole is found by the first pass, before anything is written.
	for {
		if _, err := r.br.Discard(r.br.Buffered()); err != nil {
			return fileCopy{}, "unreadable: " + errText(err), nil
		}
		if _, err := r.br.Peek(1); err == io.EOF {
			break
		} else if r.sink.err != nil {
			return fileCopy{}, "", r.sink.err
		} else if err != nil {
			return fileCopy{}, "unreadable: " + errText(err), nil
		}
	}
	if !whole {
		return fileCopy{Size: st.Size()}, "", nil
	}
	return fileCopy{Size: r.sink.n, SHA256: hex.EncodeToString(r.h.Sum(nil)), ModTime: st.ModTime().UTC()}, "", nil
}

// openTile opens a tile file for reading. O_NOFOLLOW: a file swapped for
// a link after the walk is refused too. The file is opened with
// syscall.Open and wrapped by os.NewFile, which keeps a blocking file out of
// the runtime's poller: os.OpenFile would try to register it, fail (a
// regular file cannot be polled) and undo its non-blocking mode, four
// system calls more per file, twice per tile.
func openTile(path string) (*os.File, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// sink takes the bytes read from a file: it hashes and counts them and
// writes them to dst, keeping dst's first error.
type sink struct {
	h   hash.Hash
	dst io.Writer
	n   int64
	err error
}

func (s *sink) Write(p []byte) (int, error) {
	if s.dst != nil && s.err == nil {
		if _, err := s.dst.Write(p); err != nil {
			s.err = err
		}
	}
	if s.err != nil {
		return 0, s.err
	}
	s.h.Write(p)
	s.n += int64(len(p))
	return len(p), nil
}
