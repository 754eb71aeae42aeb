package fdr

import (
	"context"
	"testing"
)

func TestKeyedAppendWritesOnceAcrossReopen(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, 0)
	e := Entry{Kind: "upload.giveup", Key: "giveup/t1/5", Payload: map[string]any{"tile_id": "t1", "attempts": 5}, Durable: true}
	first, err := r.Append(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, r, 1, 3)
	again, err := r.Append(context.Background(), e)
	if err != nil || again.Seq != first.Seq || !again.Time.Equal(first.Time) {
		t.Fatalf("same recorder: %+v, %v; want the first record %+v", again, err, first)
	}
	r.Close()
	// A new process after a crash: a new Recorder on the same file.
	r2, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	e.Payload = "different payload, same key"
	again, err = r2.Append(context.Background(), e)
	if err != nil || again.Seq != first.Seq || string(again.Payload) != string(first.Payload) {
		t.Fatalf("after reopen: %+v, %v; want the first record", again, err)
	}
	recs, _, _ := ReadFile(context.Background(), path)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
}

func TestKeyedAppendSeesAnotherWritersRecord(t *testing.T) {
	t.Parallel()
	a, path := openRing(t, 0)
	b, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e := Entry{Kind: "upload.giveup", Key: "giveup/t2/3"}
	if _, err := a.Append(context.Background(), Entry{Kind: "warmup", Key: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(context.Background(), Entry{Kind: "warmup"}); err != nil {
		t.Fatal(err)
	}
	first, err := b.Append(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	// a's index predates b's appends; it must notice and reread.
	again, err := a.Append(context.Background(), e)
	if err != nil || again.Seq != first.Seq {
		t.Fatalf("a appended %+v, %v; want b's record seq %d", again, err, first.Seq)
	}
}

func TestKeyedRecordOverwrittenByTheRingIsWrittenAgain(t *testing.T) {
	t.Parallel()
	r, _ := openRing(t, MinCapacity)
	e := Entry{Kind: "k", Key: "once"}
	first, _ := r.Append(context.Background(), e)
	appendN(t, r, 1, 3000)
	again, err := r.Append(context.Background(), e)
	if err != nil || again.Seq == first.Seq {
		t.Fatalf("got %+v, %v; want a new record once the old one left the ring", again, err)
	}
}

func TestKeyedAppendAfterAnotherWriterLappedTheRing(t *testing.T) {
	t.Parallel()
	a, path := openRing(t, MinCapacity)
	b, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := a.Append(ctx, Entry{Kind: "k", Key: "old"}); err != nil {
		t.Fatal(err)
	}
	appendN(t, b, 1, 1500) // more than one lap: a's view of the ring is obsolete
	mine, err := b.Append(ctx, Entry{Kind: "k", Key: "new"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Append(ctx, Entry{Kind: "k", Key: "new"})
	if err != nil || got.Seq != mine.Seq {
		t.Fatalf("a appended %+v, %v; want b's seq %d", got, err, mine.Seq)
	}
	got, err = a.Append(ctx, Entry{Kind: "k", Key: "old"})
	if err != nil || got.Seq != mine.Seq+1 {
		t.Fatalf("overwritten key: %+v, %v; want a new record %d", got, err, mine.Seq+1)
	}
}
