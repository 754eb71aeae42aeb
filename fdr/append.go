package fdr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Append writes one record and returns it as it will be read back. With
// e.Key set and a record of that Key still in the ring (written by any
// process), it returns that record and writes nothing. With e.Durable it
// returns only after fdatasync, so the record survives a crash or power
// loss from then on.
//
// A cancelled ctx is honoured before anything is written; once the write
// has started it completes, so no half record is left by cancellation.
func (r *Recorder) Append(ctx context.Context, e Entry) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	if err := checkField("kind", e.Kind, true); err != nil {
		return Record{}, err
	}
	if err := checkField("key", e.Key, false); err != nil {
		return Record{}, err
	}
	payload, err := json.Marshal(e.Payload)
	if err != nil {
		return Record{}, fmt.Errorf("fdr append %s: encode payload: %w", e.Kind, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Record{}, ErrClosed
	}
	n := frameHeaderLen + len(e.Kind) + len(e.Key) + len(payload)
	if n > maxFrame(r.cap) {
		return Record{}, fmt.Errorf("fdr append %s: %w (%d bytes, at most %d)", e.Kind, ErrRecordTooLarge, n, maxFrame(r.cap))
	}
	unlock, err := lockFile(r.f, true)
	if err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	defer unlock()
	h, err := r.loadHeader()
	if err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	if e.Key != "" {
		if h.nextSeq != r.seenNext {
			if err := r.catchUp(h); err != nil {
				return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
			}
		}
		if rec, ok := r.lookup(e.Key); ok {
			// The first append may have failed its sync (and its caller
			// rolled back); a durable retry must not trust the page cache.
			if e.Durable {
				if err := r.sync(r.f); err != nil {
					return Record{}, fmt.Errorf("fdr append %s: sync: %w", e.Kind, err)
				}
			}
			return rec, nil
		}
	}
	rec := Record{Seq: h.nextSeq, Kind: e.Kind, Key: e.Key, Time: time.Unix(0, r.now().UnixNano()).UTC(), Payload: payload}
	r.buf = encodeFrame(r.buf[:0], rec.Seq, rec.Time, rec.Kind, rec.Key, payload)
	if h.writeOff+uint64(n) > h.capacity {
		// The frame does not fit before the end: clear the tail so no
		// stale frame of an older lap survives there, and start over.
		if err := r.zero(h.writeOff, h.capacity); err != nil {
			return Record{}, fmt.Errorf("fdr append %s: clear ring tail: %w", e.Kind, err)
		}
		h.writeOff = 0
		h.flags |= flagWrapped
	}
	off := h.writeOff
	if _, err := r.f.WriteAt(r.buf, int64(HeaderSize+off)); err != nil {
		return Record{}, fmt.Errorf("fdr append %s: write record: %w", e.Kind, err)
	}
	h.writeOff += uint64(n)
	h.nextSeq++
	if err := r.writeHeader(h); err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	if e.Durable {
		if err := r.sync(r.f); err != nil {
			return Record{}, fmt.Errorf("fdr append %s: sync: %w", e.Kind, err)
		}
	}
	// Only our own append moved nextSeq if it was seenNext before; else
	// the index stays stale and the next keyed append rebuilds it.
	if r.seenNext == h.nextSeq-1 {
		r.seenNext, r.seenOff = h.nextSeq, h.writeOff
	}
	if e.Key != "" {
		r.keys[e.Key] = keyLoc{seq: rec.Seq, off: off}
	}
	return rec, nil
}

var zeros [64 << 10]byte

func (r *Recorder) zero(from, to uint64) error {
	for from < to {
		n := min(to-from, uint64(len(zeros)))
		if _, err := r.f.WriteAt(zeros[:n], int64(HeaderSize+from)); err != nil {
			return err
		}
		from += n
	}
	return nil
}

// lookup returns the keyed record if it is still intact where the index
// says: a later lap may have overwritten it, which the re-read detects.
func (r *Recorder) lookup(key string) (Record, bool) {
	loc, ok := r.keys[key]
	if !ok {
		return Record{}, false
	}
	buf := make([]byte, min(uint64(maxFrame(r.cap)), r.cap-loc.off))
	m, err := r.f.ReadAt(buf, int64(HeaderSize+loc.off))
	if err != nil && !errors.Is(err, io.EOF) {
		return Record{}, false
	}
	rec, _, ok := decodeFrame(buf[:m])
	if !ok || rec.Seq != loc.seq || rec.Key != key {
		delete(r.keys, key)
		return Record{}, false
	}
	return rec, true
}

var errEmptyFile = errors.New("fdr: empty file")

// loadHeader reads the header; a damaged one is rebuilt from the records
// and written back (the caller holds the exclusive lock).
func (r *Recorder) loadHeader() (header, error) {
	var b [headerLen]byte
	m, err := r.f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return header{}, fmt.Errorf("read header: %w", err)
	}
	if m == 0 || (m < headerLen && allZero(b[:m])) || allZero(b[:]) {
		return header{}, errEmptyFile
	}
	h, err := decodeHeader(b[:m])
	if !errors.Is(err, errBadHeader) {
		return h, err
	}
	area, err := r.readArea(r.fileCapacity())
	if err != nil {
		return header{}, err
	}
	h = recoverHeader(area)
	r.logf("fdr %s: header damaged; rebuilt from records: next seq %d, write offset %d", r.path, h.nextSeq, h.writeOff)
	if err := r.writeHeader(h); err != nil {
		return header{}, err
	}
	return h, nil
}

// fileCapacity is the capacity implied by the file's size, for a ring
// whose header cannot say.
func (r *Recorder) fileCapacity() uint64 {
	if r.cap != 0 {
		return r.cap
	}
	st, err := r.f.Stat()
	if err != nil || st.Size() <= HeaderSize {
		return MinCapacity
	}
	return min(max(uint64(st.Size()-HeaderSize), MinCapacity), MaxCapacity)
}

func (r *Recorder) writeHeader(h header) error {
	b := h.encode()
	if _, err := r.f.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	return nil
}

func (r *Recorder) readArea(capacity uint64) ([]byte, error) {
	area := make([]byte, capacity)
	m, err := r.f.ReadAt(area, HeaderSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read ring: %w", err)
	}
	return area[:m], nil
}

// rebuildIndex rereads every keyed record in the ring.
func (r *Recorder) rebuildIndex(h header) error {
	area, err := r.readArea(h.capacity)
	if err != nil {
		return err
	}
	clear(r.keys)
	recs, _ := scanArea(area, h.writeOff, h.wrapped())
	for _, l := range recs {
		if l.rec.Key != "" {
			if old, ok := r.keys[l.rec.Key]; !ok || old.seq < l.rec.Seq {
				r.keys[l.rec.Key] = keyLoc{seq: l.rec.Seq, off: l.off}
			}
		}
	}
	r.seenNext, r.seenOff = h.nextSeq, h.writeOff
	return nil
}

// catchUp indexes only what other writers appended since this Recorder
// last looked: the frames from its last known write offset to the current
// one, wrapping once at most. If they are not exactly the expected run of
// sequence numbers (the ring lapped, or something is damaged), it falls
// back to rereading the whole ring.
func (r *Recorder) catchUp(h header) error {
	if r.seenNext == 0 || h.nextSeq < r.seenNext {
		return r.rebuildIndex(h)
	}
	type seg struct{ from, to uint64 }
	segs := []seg{{r.seenOff, h.writeOff}}
	if h.writeOff < r.seenOff {
		segs = []seg{{r.seenOff, h.capacity}, {0, h.writeOff}}
	}
	want := r.seenNext
	var found []located
	for _, s := range segs {
		b := make([]byte, s.to-s.from)
		if _, err := r.f.ReadAt(b, int64(HeaderSize+s.from)); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read ring: %w", err)
		}
		recs, _ := scanArea(b, 0, false)
		for _, l := range recs {
			if l.rec.Seq != want {
				return r.rebuildIndex(h)
			}
			want++
			l.off += s.from
			found = append(found, l)
		}
	}
	if want != h.nextSeq {
		return r.rebuildIndex(h)
	}
	for _, l := range found {
		if l.rec.Key != "" {
			r.keys[l.rec.Key] = keyLoc{seq: l.rec.Seq, off: l.off}
		}
	}
	r.seenNext, r.seenOff = h.nextSeq, h.writeOff
	return nil
}
