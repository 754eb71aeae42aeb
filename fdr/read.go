package fdr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// ReadReport says what a read found besides the records.
type ReadReport struct {
	// Gaps are inclusive ranges of sequence numbers missing between the
	// oldest record read and the newest written: records lost to a torn or
	// corrupt write, not those the ring overwrote by design.
	Gaps [][2]uint64
	// Skipped counts damaged regions (torn, corrupt or garbage bytes)
	// passed over; the reader resynchronised on the next intact frame.
	Skipped int
	// Wrapped is set once the ring has overwritten its oldest records.
	Wrapped bool
	// HeaderDamaged is set when the header failed its checksum and was
	// reconstructed from the records.
	HeaderDamaged bool
	// NextSeq is the sequence number the next record will get.
	NextSeq uint64
}

// ReadFile reads every intact record in the ring at path, oldest first,
// each under its current kind (CurrentKind).
// Damage never fails the whole read: it is skipped and reported. The error
// is for a file that cannot be read or is not a ring at all, or for a
// ctx that ended while another process held the ring's write lock.
func ReadFile(ctx context.Context, path string) ([]Record, ReadReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, ReadReport{}, fmt.Errorf("read fdr %s: %w", path, err)
	}
	defer f.Close()
	// A shared lock waits out an append in progress, so a live ring reads
	// as a consistent snapshot; the wait ends with ctx.
	unlock, err := lockFile(ctx, f, false)
	if err != nil {
		return nil, ReadReport{}, fmt.Errorf("read fdr %s: %w", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, HeaderSize+MaxCapacity))
	unlock()
	if err != nil {
		return nil, ReadReport{}, fmt.Errorf("read fdr %s: %w", path, err)
	}
	recs, rep, err := readRing(b)
	if err != nil {
		return nil, ReadReport{}, fmt.Errorf("read fdr %s: %w", path, err)
	}
	for i := range recs {
		recs[i].Kind = CurrentKind(recs[i].Kind)
	}
	return recs, rep, nil
}

// readRing decodes a whole ring file image. It never panics.
func readRing(b []byte) ([]Record, ReadReport, error) {
	if len(b) == 0 || allZero(b[:min(len(b), headerLen)]) {
		return nil, ReadReport{NextSeq: 1}, nil // created, nothing written
	}
	h, err := decodeHeader(b)
	var rep ReadReport
	var area []byte
	switch {
	case errors.Is(err, errBadHeader):
		rep.HeaderDamaged = true
		area = b[min(len(b), HeaderSize):min(len(b), HeaderSize+MaxCapacity)]
		h = recoverHeader(area)
	case err != nil:
		return nil, ReadReport{}, err
	default:
		area = b[min(len(b), HeaderSize):min(uint64(len(b)), HeaderSize+h.capacity)]
	}
	rep.Wrapped, rep.NextSeq = h.wrapped(), h.nextSeq
	located, skipped := scanArea(area, h.writeOff, h.wrapped())
	located, uncommitted := committed(located, h)
	rep.Skipped = skipped + uncommitted
	recs := make([]Record, 0, len(located))
	for _, l := range located {
		recs = append(recs, l.rec)
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return cmpSeq(a.Seq, b.Seq) })
	recs = slices.CompactFunc(recs, func(a, b Record) bool { return a.Seq == b.Seq })
	rep.Gaps = gaps(recs, h)
	return recs, rep, nil
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// gaps lists missing sequence numbers between the oldest record and the
// header's last written one. Before the oldest nothing can be told apart
// from records the ring overwrote, except in a ring that never wrapped,
// which must start at 1.
func gaps(recs []Record, h header) [][2]uint64 {
	var out [][2]uint64
	last := uint64(0)
	if len(recs) > 0 {
		last = recs[0].Seq
		if !h.wrapped() && recs[0].Seq > 1 {
			out = append(out, [2]uint64{1, recs[0].Seq - 1})
		}
	} else if !h.wrapped() && h.nextSeq > 1 {
		return [][2]uint64{{1, h.nextSeq - 1}}
	}
	for _, r := range recs[min(1, len(recs)):] {
		if r.Seq > last+1 {
			out = append(out, [2]uint64{last + 1, r.Seq - 1})
		}
		last = r.Seq
	}
	if len(recs) > 0 && h.nextSeq > last+1 {
		out = append(out, [2]uint64{last + 1, h.nextSeq - 1})
	}
	return out
}

type located struct {
	rec Record
	off uint64
}

// scanArea walks the record area from its start, decoding frames and
// resynchronising on the next frame magic after anything that is not an
// intact frame. Zero bytes (never written, or a cleared tail) are not
// damage; neither are the remains of the oldest frame, partly overwritten,
// that start at the write offset of a wrapped ring.
func scanArea(area []byte, writeOff uint64, wrapped bool) (recs []located, skipped int) {
	o := 0
	for o < len(area) {
		if rec, n, ok := decodeFrame(area[o:]); ok {
			recs = append(recs, located{rec: rec, off: uint64(o)})
			o += n
			continue
		}
		next := len(area)
		if i := bytes.Index(area[o+1:], frameMagic[:]); i >= 0 {
			next = o + 1 + i
		}
		if !allZero(area[o:next]) && !(wrapped && uint64(o) == writeOff) {
			skipped++
		}
		o = next
	}
	return recs, skipped
}

// committed keeps the frames the header counts as records. A frame at or
// past the write offset of a ring that never wrapped, or with a sequence
// number the header has not handed out yet, was copied by an append that
// did not get to rewrite the header (a crash in between): it is not a
// record, and the next append overwrites it. It returns how many frames
// it dropped, each a trace of an interrupted append.
func committed(locs []located, h header) (kept []located, dropped int) {
	kept = locs[:0]
	for _, l := range locs {
		if l.rec.Seq >= h.nextSeq || (!h.wrapped() && l.off >= h.writeOff) {
			dropped++
			continue
		}
		kept = append(kept, l)
	}
	return kept, dropped
}

// recoverHeader derives a header from the records when the stored one is
// damaged: the next frame goes after the newest record.
func recoverHeader(area []byte) header {
	h := header{capacity: uint64(min(max(len(area), MinCapacity), MaxCapacity)), nextSeq: 1}
	recs, _ := scanArea(area, 0, false)
	for _, l := range recs {
		if l.rec.Seq >= h.nextSeq {
			h.nextSeq = l.rec.Seq + 1
			h.writeOff = l.off + uint64(frameHeaderLen+len(l.rec.Kind)+len(l.rec.Key)+len(l.rec.Payload))
		}
	}
	if !allZero(area[min(uint64(len(area)), h.writeOff):]) {
		h.flags |= flagWrapped // older frames lie beyond the newest
	}
	return h
}

// zeros backs allZero, which compares in chunks with the assembly memequal.
var zeros [64 << 10]byte

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}
