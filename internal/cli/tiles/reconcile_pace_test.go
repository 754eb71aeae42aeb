package tiles

import (
	"context"
	"testing"
	"time"
)

func TestAIMDGrowsWhileAnswersComeCleanAndHalvesOncePerStrainedGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newAIMD(8, 64)
	// Enough clean answers to grow from 8 to 64 (8+9+...+63 of them): the window grows, never past max.
	for range 3000 {
		tk, err := a.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a.release(tk, false)
	}
	if _, w := a.inFlight(); w != 64 {
		t.Fatalf("window after 3000 clean answers = %d, want 64", w)
	}
	// Ten lookups start, all answered strained: one cut, not ten.
	var tickets []uint64
	for range 10 {
		tk, _ := a.acquire(ctx)
		tickets = append(tickets, tk)
	}
	for _, tk := range tickets {
		a.release(tk, true)
	}
	if _, w := a.inFlight(); w != 32 {
		t.Fatalf("window after one strained generation = %d, want 32", w)
	}
	// A strained answer to a lookup started after the cut cuts again.
	tk, _ := a.acquire(ctx)
	a.release(tk, true)
	if _, w := a.inFlight(); w != 16 {
		t.Fatalf("window after a second strained generation = %d, want 16", w)
	}
}

func TestAIMDBlocksAtTheWindowUntilALookupEnds(t *testing.T) {
	t.Parallel()
	a := newAIMD(2, 64)
	ctx := context.Background()
	t1, _ := a.acquire(ctx)
	_, _ = a.acquire(ctx)
	got := make(chan error, 1)
	go func() { _, err := a.acquire(ctx); got <- err }()
	select {
	case <-got:
		t.Fatal("a third lookup started with a window of 2")
	case <-time.After(50 * time.Millisecond):
	}
	a.release(t1, false)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.acquire(cctx); err == nil {
		t.Fatal("acquire on a full window with a cancelled context returned no error")
	}
}
