package tilestore_test

import (
	"context"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func TestCountRejectionsUpToCountsTheFirstTilesAndLeavesTheRestUncounted(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 5)
	reject(t, s, "op-1", "bad_tile", ids...)
	reject(t, s, "op-2", "bad_tile", ids[0], ids[3])

	var hooked [][]tilestore.GiveUp
	hook := func(_ context.Context, g []tilestore.GiveUp) error { hooked = append(hooked, g); return nil }
	first, err := s.CountRejectionsUpTo(ctx, "F1", 2, 2, "", hook)
	if err != nil {
		t.Fatal(err)
	}
	// The first two tiles by ID, with all their rejections: ids[0] reaches
	// the budget of 2 and gives up, as its first give-up.
	if len(first.Attempts) != 2 || first.Counted != 3 || first.Attempts[ids[0]] != 2 || first.Attempts[ids[1]] != 1 {
		t.Fatalf("first chunk %+v, want tiles 0 and 1, 3 rejections", first)
	}
	if len(first.GaveUp) != 1 || first.GaveUp[0].TileID != ids[0] || first.GaveUp[0].Generation != 1 || len(hooked) != 1 {
		t.Fatalf("first chunk gave up %+v (hook calls %d), want tile 0 at generation 1 through one hook call", first.GaveUp, len(hooked))
	}
	if a := readTile(t, s, ids[2]).Attempts; a != 0 {
		t.Fatalf("tile 2 counted in the first chunk: %d attempts", a)
	}
	rest, err := s.CountRejectionsUpTo(ctx, "F1", 2, 2, first.Last, hook)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Attempts) != 2 || rest.Attempts[ids[2]] != 1 || rest.Attempts[ids[3]] != 2 || len(rest.GaveUp) != 1 {
		t.Fatalf("second chunk %+v, want tiles 2 and 3, tile 3 given up", rest)
	}
	last, err := s.CountRejectionsUpTo(ctx, "F1", 2, 2, rest.Last, hook)
	if err != nil || len(last.Attempts) != 1 || last.Attempts[ids[4]] != 1 {
		t.Fatalf("third chunk %+v, %v; want tile 4 alone: fewer than 2 tiles says the count is done", last, err)
	}
	if _, err := s.CountRejectionsUpTo(ctx, "F1", 2, -1, "", nil); err == nil {
		t.Error("a negative chunk size was accepted")
	}
}
