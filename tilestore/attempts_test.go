package tilestore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

func TestIncrementUploadAttemptsLosesNoUpdateUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 1)
	const workers, each = 16, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := s.IncrementUploadAttempts(ctx, ids[0]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := readTile(t, s, ids[0]).Attempts; got != workers*each {
		t.Errorf("attempts = %d, want %d", got, workers*each)
	}
	n, err := s.IncrementUploadAttempts(ctx, ids[0])
	if err != nil || n != workers*each+1 {
		t.Errorf("next increment returned %d, %v; want %d", n, err, workers*each+1)
	}
}

func TestIncrementUploadAttemptsOfUnknownTileIsTileNotFound(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 2)

	_, err := s.IncrementUploadAttempts(ctx, "ghost")
	var ute *tilestore.UnknownTilesError
	if !errors.Is(err, tilestore.ErrTileNotFound) || !errors.As(err, &ute) || len(ute.IDs) != 1 || ute.IDs[0] != "ghost" {
		t.Fatalf("err = %v, want *UnknownTilesError{ghost}", err)
	}

	_, err = s.IncrementUploadAttemptsMany(ctx, []string{ids[0], "ghost2", ids[1], "ghost1"})
	if !errors.As(err, &ute) || !errors.Is(err, tilestore.ErrTileNotFound) {
		t.Fatalf("many: err = %v, want *UnknownTilesError", err)
	}
	if len(ute.IDs) != 2 || ute.IDs[0] != "ghost1" || ute.IDs[1] != "ghost2" {
		t.Errorf("unknown IDs = %v, want [ghost1 ghost2]", ute.IDs)
	}
	for _, id := range ids {
		if got := readTile(t, s, id).Attempts; got != 0 {
			t.Errorf("tile %s attempts = %d after a refused call, want 0", id, got)
		}
	}
}

func TestIncrementUploadAttemptsManyCountsADuplicatedIDTwice(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 3)
	got, err := s.IncrementUploadAttemptsMany(ctx, []string{ids[1], ids[0], ids[1], ids[1]})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{ids[0]: 1, ids[1]: 3}
	if len(got) != len(want) || got[ids[0]] != 1 || got[ids[1]] != 3 {
		t.Errorf("returned %v, want %v", got, want)
	}
	for i, w := range []int{1, 3, 0} {
		if a := readTile(t, s, ids[i]).Attempts; a != w {
			t.Errorf("tile %d attempts = %d, want %d", i, a, w)
		}
	}
	if got, err := s.IncrementUploadAttemptsMany(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("empty call = %v, %v", got, err)
	}
}

// Callers with overlapping sets in opposite orders would deadlock if rows
// were locked in argument order; the store locks in tile_id order.
func TestIncrementUploadAttemptsManyOverlappingSetsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ids := seedFlight(t, s, "F1", 41)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const workers, rounds = 8, 15
	want := make(map[string]int)
	sets := make([][]string, workers)
	for w := range workers {
		// Worker w touches a window of 20 tiles that overlaps its
		// neighbours', shuffled differently per worker.
		set := append([]string(nil), ids[w*3:w*3+20]...)
		rng := rand.New(rand.NewPCG(uint64(w), 42))
		rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		if w%2 == 1 {
			set = append(set, set[0]) // and a duplicate
		}
		sets[w] = set
		for _, id := range set {
			want[id] += rounds
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				if _, err := s.IncrementUploadAttemptsMany(ctx, sets[w]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent IncrementUploadAttemptsMany: %v", err)
	}
	for _, id := range ids {
		if got := readTile(t, s, id).Attempts; got != want[id] {
			t.Errorf("tile %s attempts = %d, want %d", id, got, want[id])
		}
	}
}
