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
// loss from then on. It waits for the ring's lock only as long as ctx
// allows.
//
// A cancelled ctx is honoured before anything is written; once the write
// has started it completes, so no half record is left by cancellation.
func (r *Recorder) Append(ctx context.Context, e Entry) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	payload, n, err := r.encodeEntry(e)
	if err != nil {
		return Record{}, err
	}
	b, err := r.Begin(ctx)
	if errors.Is(err, ErrClosed) {
		return Record{}, ErrClosed
	}
	if err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	defer b.Release()
	rec, err := b.append(e, payload, n)
	if err == nil && e.Durable {
		err = b.Sync()
	}
	if err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	return rec, nil
}

// encodeEntry checks e and encodes its payload; n is its frame's length.
func (r *Recorder) encodeEntry(e Entry) (payload []byte, n int, err error) {
	if err := checkField("kind", e.Kind, true); err != nil {
		return nil, 0, err
	}
	if err := checkField("key", e.Key, false); err != nil {
		return nil, 0, err
	}
	payload, err = json.Marshal(e.Payload)
	if err != nil {
		return nil, 0, fmt.Errorf("fdr append %s: encode payload: %w", e.Kind, err)
	}
	n = frameHeaderLen + len(e.Kind) + len(e.Key) + len(payload)
	if n > maxFrame(r.cap) {
		return nil, 0, fmt.Errorf("fdr append %s: %w (%d bytes, at most %d)", e.Kind, ErrRecordTooLarge, n, maxFrame(r.cap))
	}
	return payload, n, nil
}

// ErrBatchOverflow is returned by Batch.Append when a record would
// overwrite one the batch already wrote, and by Batch.Sync when a record
// the batch returned is no longer in the ring: the batch holds more than
// the ring does. Nothing the batch returned may then be relied on; retry
// with fewer records.
var ErrBatchOverflow = errors.New("fdr: batch larger than the ring")

// Batch is the ring held for writing by one caller: no other writer, in
// this process or another, appends until Release. Records appended in one
// batch are made durable together by one Sync, and stay in the ring at
// least until Release, so a caller can commit what they record (a store
// transaction) while it still holds the batch and know that every record
// is there at that commit. A Batch is for one goroutine.
type Batch struct {
	r        *Recorder
	unlock   func()
	start    uint64   // record-area offset of the batch's first frame
	used     uint64   // bytes from start the batch's frames span, skipped tail included
	written  int64    // frame bytes the batch wrote
	records  int      // records the batch wrote
	returned []keyLoc // every record the batch returned, written or found
	released bool
}

// Begin takes the ring's write lock. A free lock is taken even once ctx
// has ended; a busy one (another goroutine's batch, another process's
// append) is waited for only as long as ctx allows. The caller must call
// Release.
func (r *Recorder) Begin(ctx context.Context) (*Batch, error) {
	select {
	case r.sem <- struct{}{}:
	default:
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("fdr %s: wait for the write lock held in this process: %w", r.path, context.Cause(ctx))
		}
	}
	if r.closed {
		<-r.sem
		return nil, ErrClosed
	}
	unlock, err := lockFile(ctx, r.f, true)
	if err != nil {
		<-r.sem
		return nil, fmt.Errorf("fdr %s: wait for the write lock: %w", r.path, err)
	}
	return &Batch{r: r, unlock: unlock}, nil
}

// Append writes one record without syncing it (see Sync), or, with e.Key
// set and a record of that Key still in the ring, returns that record and
// writes nothing. It returns ErrBatchOverflow, writing nothing, if the
// record would overwrite one this batch wrote.
func (b *Batch) Append(e Entry) (Record, error) {
	if b.released {
		return Record{}, fmt.Errorf("fdr append %s: batch already released", e.Kind)
	}
	payload, n, err := b.r.encodeEntry(e)
	if err != nil {
		return Record{}, err
	}
	rec, err := b.append(e, payload, n)
	if err != nil {
		return Record{}, fmt.Errorf("fdr append %s: %w", e.Kind, err)
	}
	return rec, nil
}

// Sync checks that every record the batch returned is still in the ring
// (ErrBatchOverflow if not) and makes them durable with one fdatasync.
func (b *Batch) Sync() error {
	if b.released {
		return errors.New("fdr sync: batch already released")
	}
	if err := b.check(); err != nil {
		return err
	}
	if err := b.r.sync(b.r.f); err != nil {
		return fmt.Errorf("fdr %s: sync: %w", b.r.path, err)
	}
	return nil
}

// Written is how many records, and frame bytes, the batch wrote (records
// it found already in the ring are not counted).
func (b *Batch) Written() (records int, bytes int64) { return b.records, b.written }

// Release lets other writers append again. It is safe to call twice.
func (b *Batch) Release() {
	if b.released {
		return
	}
	b.released = true
	b.unlock()
	<-b.r.sem
}

// check reports ErrBatchOverflow if a record the batch returned is no
// longer intact where it was.
func (b *Batch) check() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(interface{ Addr() uintptr }); !ok {
				panic(p)
			}
			err = ErrFileShrunk
		}
	}()
	r := b.r
	for _, loc := range b.returned {
		rec, _, ok := decodeFrame(r.area()[loc.off:min(loc.off+uint64(maxFrame(r.cap)), r.cap)])
		if !ok || rec.Seq != loc.seq {
			return fmt.Errorf("fdr %s: record %d was overwritten within its batch of %d records: %w", r.path, loc.seq, len(b.returned), ErrBatchOverflow)
		}
	}
	return nil
}

// ErrFileShrunk is returned when the ring file was truncated under a
// Recorder (by something other than this package): its mapping no longer
// has pages behind it.
var ErrFileShrunk = errors.New("fdr: ring file truncated while open")

// append does the append under both locks. Touching a mapping whose
// file was truncated raises SIGBUS; SetPanicOnFault turns that into a
// panic here, recovered as ErrFileShrunk, instead of killing the process.
func (b *Batch) append(e Entry, payload []byte, n int) (rec Record, err error) {
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
	r := b.r
	h, err := r.loadHeader()
	if err != nil {
		return Record{}, err
	}
	if e.Key != "" {
		if h.nextSeq != r.seenNext {
			r.catchUp(h)
		}
		if rec, ok := r.lookup(e.Key); ok {
			b.returned = append(b.returned, r.keys[e.Key])
			return rec, nil
		}
	}
	off, skip := h.writeOff, uint64(0)
	if off+uint64(n) > h.capacity {
		off, skip = 0, h.capacity-h.writeOff
	}
	if b.records == 0 {
		b.start, b.used, skip = off, 0, 0
	}
	if b.used+skip+uint64(n) > h.capacity {
		return Record{}, fmt.Errorf("%d records, %d bytes, fill the %d-byte ring: %w", b.records, b.written, h.capacity, ErrBatchOverflow)
	}
	rec = Record{Seq: h.nextSeq, Kind: e.Kind, Key: e.Key, Time: time.Unix(0, r.now().UnixNano()).UTC(), Payload: payload}
	if off != h.writeOff {
		// The frame does not fit before the end: clear the tail so no
		// stale frame of an older lap survives there, and start over.
		clear(r.area()[h.writeOff:])
		h.writeOff = 0
		h.flags |= flagWrapped
	}
	r.buf = encodeFrame(r.buf[:0], rec.Seq, rec.Time, rec.Kind, rec.Key, payload)
	copy(r.area()[off:], r.buf)
	h.writeOff += uint64(n)
	h.nextSeq++
	r.writeHeader(h)
	b.used += skip + uint64(n)
	b.written += int64(n)
	b.records++
	b.returned = append(b.returned, keyLoc{seq: rec.Seq, off: off})
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
