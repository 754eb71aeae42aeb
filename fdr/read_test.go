package fdr

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// frameOffsets returns the file offset of each record, by seq.
func frameOffsets(t *testing.T, path string) map[uint64]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	locs, _ := scanArea(b[HeaderSize:HeaderSize+h.capacity], h.writeOff, h.wrapped())
	out := map[uint64]int64{}
	for _, l := range locs {
		out[l.rec.Seq] = HeaderSize + int64(l.off)
	}
	return out
}

func TestTruncatedLastRecordIsSkipped(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	appendN(t, r, 1, 10)
	r.Close()
	offs := frameOffsets(t, path)
	if err := os.Truncate(path, offs[10]+20); err != nil { // mid-frame
		t.Fatal(err)
	}
	recs, rep, err := ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 9 || recs[8].Seq != 9 || rep.Skipped != 1 || !reflect.DeepEqual(rep.Gaps, [][2]uint64{{10, 10}}) {
		t.Fatalf("%d records, report %+v", len(recs), rep)
	}
	// A writer reopening the cut file regrows it and carries on.
	r2, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if rec, err := r2.Append(context.Background(), Entry{Kind: "after"}); err != nil || rec.Seq != 11 {
		t.Fatalf("append after truncation = %+v, %v", rec, err)
	}
}

func TestCorruptRecordIsSkippedAndTheRestRead(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 20; trial++ {
		path := filepath.Join(t.TempDir(), "fdr.ring")
		r, err := Open(context.Background(), path, Options{Capacity: MinCapacity})
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, r, 1, 20)
		r.Close()
		offs := frameOffsets(t, path)
		victim := uint64(rng.IntN(20) + 1)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Overwrite 1-8 random bytes somewhere inside the victim's frame.
		end := offs[victim+1]
		if victim == 20 {
			end = offs[20] + 40
		}
		at := offs[victim] + rng.Int64N(end-offs[victim])
		junk := make([]byte, 1+rng.IntN(8))
		for i := range junk {
			junk[i] = byte(rng.IntN(255) + 1)
		}
		junk = junk[:min(int64(len(junk)), end-at)]
		orig := make([]byte, len(junk))
		f.ReadAt(orig, at)
		if reflect.DeepEqual(orig, junk) {
			f.Close()
			continue
		}
		f.WriteAt(junk, at)
		f.Close()
		recs, rep, err := ReadFile(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 19 || rep.Skipped != 1 || !reflect.DeepEqual(rep.Gaps, [][2]uint64{{victim, victim}}) {
			t.Fatalf("trial %d, corrupted seq %d at +%d: %d records, report %+v", trial, victim, at-offs[victim], len(recs), rep)
		}
		for _, rec := range recs {
			if rec.Seq == victim {
				t.Fatalf("corrupt record %d returned", victim)
			}
		}
	}
}

func TestGarbageBetweenRecordsAndGapsAreReported(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	appendN(t, r, 1, 10)
	r.Close()
	offs := frameOffsets(t, path)
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	// Wipe records 3-4 with garbage and record 7 with zeros.
	garbage := make([]byte, offs[5]-offs[3])
	for i := range garbage {
		garbage[i] = 'G'
	}
	f.WriteAt(garbage, offs[3])
	f.WriteAt(make([]byte, offs[8]-offs[7]), offs[7])
	f.Close()
	recs, rep, err := ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, rec := range recs {
		seqs = append(seqs, rec.Seq)
	}
	if !reflect.DeepEqual(seqs, []uint64{1, 2, 5, 6, 8, 9, 10}) || rep.Skipped != 1 ||
		!reflect.DeepEqual(rep.Gaps, [][2]uint64{{3, 4}, {7, 7}}) {
		t.Fatalf("seqs %v, report %+v", seqs, rep)
	}
}

func TestDamagedHeaderIsRebuiltFromRecords(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	appendN(t, r, 1, 2000) // wraps
	r.Close()
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte{0xAB, 0xCD}, 30) // inside write offset / next seq
	f.Close()
	recs, rep, err := ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.HeaderDamaged || !rep.Wrapped || rep.NextSeq != 2001 || recs[len(recs)-1].Seq != 2000 || len(rep.Gaps) != 0 {
		t.Fatalf("report %+v, newest %d", rep, recs[len(recs)-1].Seq)
	}
	var logged int
	r2, err := Open(context.Background(), path, Options{Logf: func(string, ...any) { logged++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	rec, err := r2.Append(context.Background(), Entry{Kind: "after"})
	if err != nil || rec.Seq != 2001 || logged != 1 {
		t.Fatalf("append after header damage = %+v, %v (logged %d)", rec, err, logged)
	}
	recs2, rep2, _ := ReadFile(context.Background(), path)
	if rep2.HeaderDamaged || recs2[len(recs2)-1].Seq != 2001 || len(rep2.Gaps) != 0 || rep2.Skipped != 0 {
		t.Fatalf("after repair: report %+v", rep2)
	}
}

func TestNotARingIsAnErrorAndIsNotClobbered(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(path, []byte("dear diary"), 0o600)
	if _, _, err := ReadFile(context.Background(), path); !errors.Is(err, ErrNotRing) {
		t.Fatalf("ReadFile: %v, want ErrNotRing", err)
	}
	if _, err := Open(context.Background(), path, Options{}); !errors.Is(err, ErrNotRing) {
		t.Fatalf("Open: %v, want ErrNotRing", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "dear diary" {
		t.Fatalf("file changed to %q", b)
	}
	if _, _, err := ReadFile(context.Background(), filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestEmptyRingReadsAsNothing(t *testing.T) {
	t.Parallel()
	_, path := openRing(t, MinCapacity)
	recs, rep, err := ReadFile(context.Background(), path)
	if err != nil || len(recs) != 0 || rep.Skipped != 0 || len(rep.Gaps) != 0 || rep.NextSeq != 1 {
		t.Fatalf("%v %+v %v", recs, rep, err)
	}
}

func FuzzReadRing(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.ring")
	r, err := Open(context.Background(), path, Options{Capacity: MinCapacity})
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		r.Append(context.Background(), Entry{Kind: "k", Key: "x" + string(rune('a'+i)), Payload: i})
	}
	r.Close()
	seed, _ := os.ReadFile(path)
	// Fuzzing a 68 KiB image is slow; seed with the header plus the used area.
	f.Add(seed[:HeaderSize+400])
	f.Add([]byte{})
	f.Add(append(append([]byte{}, seed[:64]...), 1, 2, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, rep, err := readRing(b)
		if err != nil {
			return
		}
		if rep.Skipped < 0 || rep.Skipped > len(b) {
			t.Fatalf("skipped %d of %d bytes", rep.Skipped, len(b))
		}
		for i := 1; i < len(recs); i++ {
			if recs[i].Seq <= recs[i-1].Seq {
				t.Fatalf("not strictly ordered: %d then %d", recs[i-1].Seq, recs[i].Seq)
			}
		}
		for _, g := range rep.Gaps {
			if g[0] > g[1] || g[0] == 0 {
				t.Fatalf("bad gap %v", g)
			}
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeFrame(nil, 7, t0, "upload.giveup", "giveup/t/5", []byte(`{"tile_id":"t"}`)), uint16(0), byte(0))
	f.Add([]byte{0xFF, 'F', 'R', 0, 32, 0, 0, 0}, uint16(4), byte(1))
	f.Fuzz(func(t *testing.T, b []byte, at uint16, flip byte) {
		if rec, n, ok := decodeFrame(b); ok {
			if n < frameHeaderLen || n > len(b) {
				t.Fatalf("length %d of %d", n, len(b))
			}
			// Re-encoding what was decoded gives the same frame back.
			again := encodeFrame(nil, rec.Seq, rec.Time, rec.Kind, rec.Key, rec.Payload)
			if string(again) != string(b[:n]) {
				t.Fatalf("re-encode differs:\n%x\n%x", again, b[:n])
			}
			// Any single-byte change to an intact frame is detected.
			if flip != 0 && int(at) < n {
				c := append([]byte(nil), b[:n]...)
				c[at] ^= flip
				if r2, _, ok := decodeFrame(c); ok {
					t.Fatalf("corrupted byte %d accepted as %+v", at, r2)
				}
			}
		}
	})
}
