package fdr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
	"unicode/utf8"
)

// The on-disk layout is described in FORMAT.md; keep the two in step.
const (
	// HeaderSize is the bytes before the record area. The header proper is
	// headerLen bytes; the rest of the page is reserved so that a header
	// write never shares a page with records.
	HeaderSize = 4096
	headerLen  = 64
	version    = 1

	// DefaultCapacity is the record area's size when Options.Capacity is 0.
	DefaultCapacity = 4 << 20
	// MinCapacity and MaxCapacity bound Options.Capacity.
	MinCapacity = 64 << 10
	MaxCapacity = 1 << 30

	frameHeaderLen = 32
	// MaxFieldLen bounds Kind and Key.
	MaxFieldLen = 255

	flagWrapped = 1 << 0
)

var (
	headerMagic = [8]byte{'T', 'I', 'L', 'E', 'F', 'D', 'R', 0}
	// frameMagic holds 0xFF, which never occurs in UTF-8, and 0x00, which
	// encoding/json never writes, so no Kind, Key or JSON payload can
	// contain it: a resyncing reader cannot be fooled by record contents.
	frameMagic = [4]byte{0xFF, 'F', 'R', 0x00}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// ErrRecordTooLarge is returned by Append for an entry whose frame would
// exceed the ring's largest record (a quarter of its capacity, at most 1 MiB).
var ErrRecordTooLarge = errors.New("fdr: record too large for the ring")

// ErrNotRing is returned for a file that is not a ring of this format.
var ErrNotRing = errors.New("fdr: not a flight data recorder file")

// header is the ring's first headerLen bytes.
type header struct {
	flags    uint32
	capacity uint64
	writeOff uint64 // offset in the record area where the next frame goes
	nextSeq  uint64 // sequence number of the next record; starts at 1
	created  int64  // unix nanoseconds
}

func (h header) wrapped() bool { return h.flags&flagWrapped != 0 }

func (h header) encode() [headerLen]byte {
	var b [headerLen]byte
	copy(b[0:8], headerMagic[:])
	binary.LittleEndian.PutUint32(b[8:], version)
	binary.LittleEndian.PutUint32(b[12:], h.flags)
	binary.LittleEndian.PutUint64(b[16:], h.capacity)
	binary.LittleEndian.PutUint64(b[24:], h.writeOff)
	binary.LittleEndian.PutUint64(b[32:], h.nextSeq)
	binary.LittleEndian.PutUint64(b[40:], uint64(h.created))
	binary.LittleEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	return b
}

// errBadHeader marks a header whose magic matches but whose checksum or
// fields do not: the ring is ours, the header was torn or damaged.
var errBadHeader = errors.New("fdr: header damaged")

func decodeHeader(b []byte) (header, error) {
	if len(b) < headerLen || [8]byte(b[0:8]) != headerMagic {
		return header{}, ErrNotRing
	}
	if crc32.Checksum(b[:60], castagnoli) != binary.LittleEndian.Uint32(b[60:]) {
		return header{}, errBadHeader
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != version {
		return header{}, fmt.Errorf("%w: version %d, this build reads %d", ErrNotRing, v, version)
	}
	h := header{
		flags:    binary.LittleEndian.Uint32(b[12:]),
		capacity: binary.LittleEndian.Uint64(b[16:]),
		writeOff: binary.LittleEndian.Uint64(b[24:]),
		nextSeq:  binary.LittleEndian.Uint64(b[32:]),
		created:  int64(binary.LittleEndian.Uint64(b[40:])),
	}
	if h.capacity < MinCapacity || h.capacity > MaxCapacity || h.writeOff > h.capacity || h.nextSeq == 0 {
		return header{}, errBadHeader
	}
	return h, nil
}

// maxFrame is the largest frame a ring of the given capacity accepts.
func maxFrame(capacity uint64) int {
	return int(min(capacity/4, 1<<20))
}

// encodeFrame appends one framed record to dst:
//
//	magic[4] length u32 crc u32 seq u64 time i64 kindLen u16 keyLen u16
//	kind key payload
//
// The CRC32C covers the length and everything after the crc field.
func encodeFrame(dst []byte, seq uint64, t time.Time, kind, key string, payload []byte) []byte {
	n := frameHeaderLen + len(kind) + len(key) + len(payload)
	start := len(dst)
	dst = append(dst, make([]byte, frameHeaderLen)...)
	f := dst[start:]
	copy(f[0:4], frameMagic[:])
	binary.LittleEndian.PutUint32(f[4:], uint32(n))
	binary.LittleEndian.PutUint64(f[12:], seq)
	binary.LittleEndian.PutUint64(f[20:], uint64(t.UnixNano()))
	binary.LittleEndian.PutUint16(f[28:], uint16(len(kind)))
	binary.LittleEndian.PutUint16(f[30:], uint16(len(key)))
	dst = append(dst, kind...)
	dst = append(dst, key...)
	dst = append(dst, payload...)
	f = dst[start:]
	crc := crc32.Update(crc32.Checksum(f[4:8], castagnoli), castagnoli, f[12:])
	binary.LittleEndian.PutUint32(f[8:], crc)
	return dst
}

// decodeFrame reads the frame at the start of b. It returns the record and
// the frame's length, or ok=false if b does not start with a whole, intact
// frame. It never panics and never allocates for a bad frame.
func decodeFrame(b []byte) (rec Record, n int, ok bool) {
	if len(b) < frameHeaderLen || [4]byte(b[0:4]) != frameMagic {
		return Record{}, 0, false
	}
	n64 := uint64(binary.LittleEndian.Uint32(b[4:]))
	kl := int(binary.LittleEndian.Uint16(b[28:]))
	ml := int(binary.LittleEndian.Uint16(b[30:]))
	if n64 < frameHeaderLen || n64 > uint64(len(b)) || kl > MaxFieldLen || ml > MaxFieldLen ||
		uint64(frameHeaderLen+kl+ml) > n64 {
		return Record{}, 0, false
	}
	n = int(n64)
	f := b[:n]
	crc := crc32.Update(crc32.Checksum(f[4:8], castagnoli), castagnoli, f[12:])
	if crc != binary.LittleEndian.Uint32(f[8:]) {
		return Record{}, 0, false
	}
	seq := binary.LittleEndian.Uint64(f[12:])
	if seq == 0 {
		return Record{}, 0, false
	}
	kind := f[frameHeaderLen : frameHeaderLen+kl]
	key := f[frameHeaderLen+kl : frameHeaderLen+kl+ml]
	payload := f[frameHeaderLen+kl+ml:]
	rec = Record{
		Seq:     seq,
		Kind:    string(kind),
		Key:     string(key),
		Time:    time.Unix(0, int64(binary.LittleEndian.Uint64(f[20:]))).UTC(),
		Payload: append([]byte(nil), payload...),
	}
	return rec, n, true
}

// checkField enforces what makes frameMagic unforgeable: valid UTF-8 with
// no NUL, and a length that fits the frame's u16 (bounded further).
func checkField(name, s string, required bool) error {
	switch {
	case required && s == "":
		return fmt.Errorf("fdr: %s is empty", name)
	case len(s) > MaxFieldLen:
		return fmt.Errorf("fdr: %s is %d bytes, at most %d", name, len(s), MaxFieldLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("fdr: %s is not valid UTF-8", name)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return fmt.Errorf("fdr: %s contains NUL", name)
		}
	}
	return nil
}
