package fdr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
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
	rec, err := r.appendLocked(e, payload, n)
	if err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	return rec, nil
}

// ErrFileShrunk is returned when the ring file was truncated under a
// Recorder (by something other than this package): its mapping no longer
// has pages behind it.
var ErrFileShrunk = errors.New("fdr: ring file truncated while open")

// appendLocked does the append under both locks. Touching a mapping whose
// file was truncated raises SIGBUS; SetPanicOnFault turns that into a
// panic here, recovered as ErrFileShrunk, instead of killing the process.
func (r *Recorder) appendLocked(e Entry, payload []byte, n int) (rec Record, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			// Only a memory fault carries the faulting address; any other
			// panic is a bug and is not disguised as a shrunk file.
			if _, ok := p.(interface{ Addr() uintptr }); !ok {
				panic(p)
			}
			err = ErrFileShrunk
		}
	}()
	h, err := r.loadHeader()
	if err != nil {
		return Record{}, err
	}
	if e.Key != "" {
		if h.nextSeq != r.seenNext {
			r.catchUp(h)
		}
		if rec, ok := r.lookup(e.Key); ok {
			// The first append may have failed its sync (and its caller
			// rolled back); a durable retry must not trust the page cache.
			if e.Durable {
				if err := r.sync(r.f); err != nil {
					return Record{}, fmt.Errorf("sync: %w", err)
				}
			}
			return rec, nil
		}
	}
	rec = Record{Seq: h.nextSeq, Kind: e.Kind, Key: e.Key, Time: time.Unix(0, r.now().UnixNano()).UTC(), Payload: payload}
	if h.writeOff+uint64(n) > h.capacity {
		// The frame does not fit before the end: clear the tail so no
		// stale frame of an older lap survives there, and start over.
		clear(r.area()[h.writeOff:])
		h.writeOff = 0
		h.flags |= flagWrapped
	}
	off := h.writeOff
	r.buf = encodeFrame(r.buf[:0], rec.Seq, rec.Time, rec.Kind, rec.Key, payload)
	copy(r.area()[off:], r.buf)
	h.writeOff += uint64(n)
	h.nextSeq++
	r.writeHeader(h)
	if e.Durable {
		if err := r.sync(r.f); err != nil {
			return Record{}, fmt.Errorf("sync: %w", err)
		}
	}
	// Only our own append moved nextSeq if it was seenNext before; else
	// the index stays stale and the next keyed append catches up.
	if r.seenNext == h.nextSeq-1 {
		r.seenNext, r.seenOff = h.nextSeq, h.writeOff
	}
	if e.Key != "" {
		r.keys[e.Key] = keyLoc{seq: rec.Seq, off: off}
	}
	return rec, nil
}

// area is the mapped record area.
func (r *Recorder) area() []byte { return r.mem[HeaderSize : HeaderSize+r.cap] }

// lookup returns the keyed record if it is still intact where the index
// says: a later lap may have overwritten it, which the re-read detects.
func (r *Recorder) lookup(key string) (Record, bool) {
	loc, ok := r.keys[key]
	if !ok {
		return Record{}, false
	}
	rec, _, ok := decodeFrame(r.area()[loc.off:min(loc.off+uint64(maxFrame(r.cap)), r.cap)])
	if !ok || rec.Seq != loc.seq || rec.Key != key {
		delete(r.keys, key)
		return Record{}, false
	}
	return rec, true
}

// loadHeader reads the header; a damaged one is rebuilt from the records
// and written back (the caller holds the exclusive lock).
func (r *Recorder) loadHeader() (header, error) {
	h, err := decodeHeader(r.mem[:headerLen])
	if !errors.Is(err, errBadHeader) {
		return h, err
	}
	h = recoverHeader(r.area())
	r.logf("fdr %s: header damaged; rebuilt from records: next seq %d, write offset %d", r.path, h.nextSeq, h.writeOff)
	r.writeHeader(h)
	return h, nil
}

// fileCapacity is the capacity implied by the file's size, for a ring
// whose header cannot say.
func (r *Recorder) fileCapacity() uint64 {
	st, err := r.f.Stat()
	if err != nil || st.Size() <= HeaderSize {
		return MinCapacity
	}
	return min(max(uint64(st.Size()-HeaderSize), MinCapacity), MaxCapacity)
}

func (r *Recorder) writeHeader(h header) {
	b := h.encode()
	copy(r.mem[:headerLen], b[:])
}

// rebuildIndex rereads every keyed record in the ring.
func (r *Recorder) rebuildIndex(h header) {
	area := r.area()
	clear(r.keys)
	recs, _ := scanArea(area, h.writeOff, h.wrapped())
	recs, _ = committed(recs, h)
	for _, l := range recs {
		if l.rec.Key != "" {
			if old, ok := r.keys[l.rec.Key]; !ok || old.seq < l.rec.Seq {
				r.keys[l.rec.Key] = keyLoc{seq: l.rec.Seq, off: l.off}
			}
		}
	}
	r.seenNext, r.seenOff = h.nextSeq, h.writeOff
}

// catchUp indexes only what other writers appended since this Recorder
// last looked: the frames from its last known write offset to the current
// one, wrapping once at most. If they are not exactly the expected run of
// sequence numbers (the ring lapped, or something is damaged), it falls
// back to rereading the whole ring.
func (r *Recorder) catchUp(h header) {
	if r.seenNext == 0 || h.nextSeq < r.seenNext {
		r.rebuildIndex(h)
		return
	}
	type seg struct{ from, to uint64 }
	segs := []seg{{r.seenOff, h.writeOff}}
	if h.writeOff < r.seenOff {
		segs = []seg{{r.seenOff, h.capacity}, {0, h.writeOff}}
	}
	want := r.seenNext
	var found []located
	for _, s := range segs {
		b := r.area()[s.from:s.to]
		recs, _ := scanArea(b, 0, false)
		for _, l := range recs {
			if l.rec.Seq != want {
				r.rebuildIndex(h)
				return
			}
			want++
			l.off += s.from
			found = append(found, l)
		}
	}
	if want != h.nextSeq {
		r.rebuildIndex(h)
		return
	}
	for _, l := range found {
		if l.rec.Key != "" {
			r.keys[l.rec.Key] = keyLoc{seq: l.rec.Seq, off: l.off}
		}
	}
	r.seenNext, r.seenOff = h.nextSeq, h.writeOff
}
