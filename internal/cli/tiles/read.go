package tiles

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"
	"syscall"
	"time"
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

func newTileReader() *tileReader {
	return &tileReader{br: bufio.NewReaderSize(nil, readBuffer), h: sha256.New()}
}

// fileCopy is what reading a whole tile file found.
type fileCopy struct {
	Size    int64
	SHA256  string
	ModTime time.Time
}

// check opens c's file and checks that it is a regular, non-empty file
// whose first bytes are an image of c's type; it reads no further than the
// check needs. reason says what is wrong ("" when nothing is).
func (r *tileReader) check(c candidate) (reason string) {
	_, reason, _ = r.read(c, false, nil)
	return reason
}

// copy reads c's whole file once: it checks it as check does, hashes it,
// and writes every byte to dst (when not nil) as it is read, so the bytes
// hashed are the bytes written. reason says why the file is not a valid
// tile (dst then holds part of it); err is dst's write error.
func (r *tileReader) copy(c candidate, dst io.Writer) (got fileCopy, reason string, err error) {
	return r.read(c, true, dst)
}

func (r *tileReader) read(c candidate, whole bool, dst io.Writer) (fileCopy, string, error) {
	// O_NOFOLLOW: a file swapped for a link after the walk is refused too.
	f, err := os.OpenFile(c.Path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
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
	if reason != "" || !whole {
		return fileCopy{}, reason, nil
	}
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
	return fileCopy{Size: r.sink.n, SHA256: hex.EncodeToString(r.h.Sum(nil)), ModTime: st.ModTime().UTC()}, "", nil
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
