package fdr

import (
	"context"
	"os"
	"testing"
)

// crashAfterFrameCopy leaves the ring as a crash between copying a frame
// and rewriting the header does: the frame of e is whole in the record
// area, the header is the one from before the append.
func crashAfterFrameCopy(t *testing.T, path string, e Entry) {
	t.Helper()
	before := readHeaderPage(t, path)
	r, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Append(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	r.Close()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(before, 0); err != nil {
		t.Fatal(err)
	}
}

func readHeaderPage(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[:HeaderSize]
}

func TestAFrameTheHeaderNeverCommittedIsNotARecord(t *testing.T) {
	t.Parallel()
	for _, wrapped := range []bool{false, true} {
		name := "fresh ring"
		if wrapped {
			name = "wrapped ring"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, path := openRing(t, MinCapacity)
			if wrapped {
				appendN(t, r, 1, 3000) // laps a 64 KiB ring
			} else {
				appendN(t, r, 1, 5)
			}
			r.Close()
			_, before, err := ReadFile(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			giveUp := Entry{Kind: "upload.giveup", Key: "giveup/t1/1", Durable: true, Payload: map[string]string{"tile_id": "t1"}}
			crashAfterFrameCopy(t, path, giveUp)

			recs, rep, err := ReadFile(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				if rec.Key == giveUp.Key || rec.Seq >= rep.NextSeq {
					t.Fatalf("reader returned the uncommitted frame as record %d (key %q, next seq %d)", rec.Seq, rec.Key, rep.NextSeq)
				}
			}
			if rep.NextSeq != before.NextSeq {
				t.Fatalf("next seq %d, want %d as committed", rep.NextSeq, before.NextSeq)
			}

			// The keyed append after the crash must write its record, not
			// find the uncommitted frame and write nothing.
			r2, err := Open(context.Background(), path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer r2.Close()
			got, err := r2.Append(context.Background(), giveUp)
			if err != nil {
				t.Fatal(err)
			}
			if got.Seq != before.NextSeq {
				t.Fatalf("keyed append returned seq %d, want a new record at committed next seq %d", got.Seq, before.NextSeq)
			}
			appendN(t, r2, 1, 3) // would overwrite a frame the header never counted
			recs, _, err = ReadFile(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, rec := range recs {
				if rec.Key == giveUp.Key {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d records with key %s after the next appends, want 1", n, giveUp.Key)
			}
		})
	}
}
