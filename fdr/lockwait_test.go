package fdr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tilectl/tilectl/fdr/fdrtest"
)

func TestAppendWaitsForABusyLockOnlyAsLongAsItsContext(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	release := fdrtest.HoldLock(t, path)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	type result struct {
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		_, err := r.Append(ctx, Entry{Kind: "upload.giveup", Key: "giveup/t1/1", Durable: true})
		done <- result{err, time.Since(start)}
	}()
	select {
	case res := <-done:
		if !errors.Is(res.err, context.DeadlineExceeded) {
			t.Fatalf("append under a held lock: %v, want the context's deadline", res.err)
		}
		if res.elapsed > 2*time.Second {
			t.Fatalf("append returned %s after a 200ms deadline", res.elapsed)
		}
	case <-time.After(5 * time.Second):
		release() // let the blocked append finish
		<-done
		t.Fatal("append still waiting for the lock 5s after its 200ms deadline")
	}

	// Once the holder lets go, the same recorder appends, even with a
	// context already ended: a free lock is taken.
	release()
	b, err := r.Begin(ctx)
	if err != nil {
		t.Fatalf("begin on a free lock with an ended context: %v", err)
	}
	if _, err := b.Append(Entry{Kind: "upload.giveup", Key: "giveup/t1/1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	b.Release()
	recs, _, err := ReadFile(context.Background(), path)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read %d records, %v; want the one appended after the holder let go", len(recs), err)
	}
}

func TestBeginWaitsForAnotherBatchOfTheSameRecorderOnlyAsLongAsItsContext(t *testing.T) {
	t.Parallel()
	r, _ := openRing(t, MinCapacity)
	first, err := r.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Begin(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Begin while the first batch is held: %v, want the deadline", err)
	}
	first.Release()
	first.Release() // twice is harmless
	second, err := r.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	second.Release()
}

func TestABatchNeverOverwritesARecordItReturned(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	appendN(t, r, 1, 10)
	old, err := r.Append(context.Background(), Entry{Kind: "upload.giveup", Key: "giveup/old/1"})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, r, 11, 200)

	b, err := r.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	// The batch finds a record written before it...
	if found, err := b.Append(Entry{Kind: "upload.giveup", Key: "giveup/old/1"}); err != nil || found.Seq != old.Seq {
		t.Fatalf("keyed append = %+v, %v; want the existing record %d", found, err, old.Seq)
	}
	// ...then writes until the ring is full of its own records.
	var wrote []Record
	for i := 0; ; i++ {
		rec, err := b.Append(Entry{Kind: "upload.giveup", Key: fmt.Sprintf("giveup/new/%d", i), Payload: map[string]int{"i": i}})
		if errors.Is(err, ErrBatchOverflow) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		wrote = append(wrote, rec)
		if i > 10000 {
			t.Fatal("a 64 KiB ring took 10,000 records in one batch without overflowing")
		}
	}
	if n, bytes := b.Written(); n != len(wrote) || bytes > MinCapacity {
		t.Fatalf("Written() = %d records, %d bytes; want %d records within %d bytes", n, bytes, len(wrote), MinCapacity)
	}
	// Every record the batch wrote is still in the ring... (read without
	// the lock, which the batch holds)
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := readRing(img)
	if err != nil {
		t.Fatal(err)
	}
	in := map[uint64]bool{}
	for _, rec := range recs {
		in[rec.Seq] = true
	}
	for _, rec := range wrote {
		if !in[rec.Seq] {
			t.Fatalf("record %d of the batch was overwritten by the same batch", rec.Seq)
		}
	}
	// ...but the one it found was overwritten, and Sync says so.
	if in[old.Seq] {
		t.Fatalf("record %d survived a batch that filled the ring", old.Seq)
	}
	if err := b.Sync(); !errors.Is(err, ErrBatchOverflow) {
		t.Fatalf("Sync after a returned record was overwritten: %v, want ErrBatchOverflow", err)
	}
}

func TestOpenWaitsForABusyLockOnlyAsLongAsItsContext(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	r.Close()
	release := fdrtest.HoldLock(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		r2, err := Open(ctx, path, Options{})
		if err == nil {
			r2.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("open under a held lock: %v, want the context's deadline", err)
		}
	case <-time.After(5 * time.Second):
		release()
		<-done
		t.Fatal("open still waiting for the lock 5s after its 200ms deadline")
	}
}

func TestReadFileWaitsForAHeldLockOnlyAsLongAsItsContext(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	if _, err := r.Append(context.Background(), Entry{Kind: "upload.giveup", Key: "giveup/t1/1", Durable: true}); err != nil {
		t.Fatal(err)
	}
	release := fdrtest.HoldLock(t, path) // a writer of another process, mid-append

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := ReadFile(ctx, path)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read under a held lock: %v, want the context's deadline", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("read returned %s after a 200ms deadline", took)
		}
	case <-time.After(5 * time.Second):
		release() // let the blocked read finish
		<-done
		t.Fatal("read still waiting for the lock 5s after its 200ms deadline")
	}

	// Once the holder lets go, the ring reads, even with the ended context.
	release()
	recs, _, err := ReadFile(ctx, path)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read on a free lock: %d records, %v; want the 1 appended", len(recs), err)
	}
}
