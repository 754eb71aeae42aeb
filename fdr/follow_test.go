package fdr

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestFollowEmitsExistingThenNewRecords(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "later", "fdr.ring")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Record, 16)
	done := make(chan error, 1)
	// Follow starts before the file exists and must wait for it.
	go func() {
		done <- Follow(ctx, path, 1, time.Millisecond, func(r Record) error { got <- r; return nil })
	}()
	r, err := Open(context.Background(), path, Options{Capacity: MinCapacity})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	appendN(t, r, 1, 3) // seq 1 is at or before "after": not emitted
	for want := uint64(2); want <= 3; want++ {
		select {
		case rec := <-got:
			if rec.Seq != want {
				t.Fatalf("emitted seq %d, want %d", rec.Seq, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("seq %d never emitted", want)
		}
	}
	appendN(t, r, 4, 1)
	select {
	case rec := <-got:
		if rec.Seq != 4 {
			t.Fatalf("emitted seq %d, want 4", rec.Seq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("new record never emitted")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow returned %v, want context.Canceled", err)
	}
}

func TestFollowStopsWhenEmitFails(t *testing.T) {
	t.Parallel()
	r, path := openRing(t, MinCapacity)
	appendN(t, r, 1, 2)
	stop := errors.New("stop")
	err := Follow(context.Background(), path, 0, time.Millisecond, func(Record) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("Follow returned %v", err)
	}
}
