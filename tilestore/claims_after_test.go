package tilestore_test

import (
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// A claim with After starts after that tile; Last names the last tile the
// claim took, the next claim's After. A tile freed behind the cursor is
// found again by a claim without After.
func TestAClaimAfterACursorStartsThereAndLastNamesTheNextCursor(t *testing.T) {
	t.Parallel()
	s := newStore(t).ForRun(tilestore.Run{ID: "run-a", Lease: time.Minute})
	ids := seedFlight(t, s, "FA", 8)
	ctx := testCtx(t)

	first, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FA", Limit: 3, OpID: "op-1", Pick: pickAll("op-1")})
	if err != nil || first.Last.ID != ids[2] || len(first.Tiles) != 3 {
		t.Fatalf("first claim %+v, %v; want tiles 0-2, Last tile 2", first, err)
	}
	second, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FA", Limit: 3, After: first.Last, OpID: "op-2", Pick: pickAll("op-2")})
	if err != nil || len(second.Tiles) != 3 || second.Tiles[0].ID != ids[3] || second.Last.ID != ids[5] {
		t.Fatalf("second claim %+v, %v; want tiles 3-5, Last tile 5", second, err)
	}
	// The provider rejects the first batch's tiles: they are free again,
	// behind the cursor.
	st := tilestore.Settlement{OpID: "op-1", HTTPStatus: 200}
	for _, id := range ids[:3] {
		st.Rejections = append(st.Rejections, tilestore.Rejection{OpID: "op-1", TileID: id, Reason: "bad_tile"})
	}
	if err := s.SettleBatch(ctx, st); err != nil {
		t.Fatal(err)
	}
	third, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FA", Limit: 3, After: second.Last, OpID: "op-3", Pick: pickAll("op-3")})
	if err != nil || len(third.Tiles) != 2 || third.Tiles[0].ID != ids[6] || third.Last.ID != ids[7] {
		t.Fatalf("third claim %+v, %v; want tiles 6-7, Last tile 7", third, err)
	}
	past, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FA", Limit: 3, After: third.Last, OpID: "op-4", Pick: pickAll("op-4")})
	if err != nil || past.Candidates != 0 {
		t.Fatalf("a claim past the last tile %+v, %v; want no candidates", past, err)
	}
	again, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FA", Limit: 3, OpID: "op-5", Pick: pickAll("op-5")})
	if err != nil || len(again.Tiles) != 3 || again.Tiles[0].ID != ids[0] {
		t.Fatalf("a claim without After %+v, %v; want the rejected tiles 0-2", again, err)
	}
}

// A claim's At is asked for the cursor once the claim holds a connection
// and its transaction has begun, and what it says replaces After: the
// uploader's workers take their turn there, not before a connection is
// theirs.
func TestAClaimAsksAtForItsCursorOnceItsTransactionHasBegun(t *testing.T) {
	t.Parallel()
	s := newStore(t).ForRun(tilestore.Run{ID: "run-at", Lease: time.Minute})
	ids := seedFlight(t, s, "FT", 8)
	ctx := testCtx(t)
	first, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FT", Limit: 3, OpID: "op-1", Pick: pickAll("op-1")})
	if err != nil || first.Last.ID != ids[2] {
		t.Fatalf("first claim %+v, %v; want tiles 0-2", first, err)
	}
	calls := 0
	var held int32
	at := func() tilestore.Cursor {
		calls++
		held = s.Pool().Stat().AcquiredConns()
		return first.Last
	}
	// After names no tile: At's cursor is the one the claim goes by.
	second, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FT", Limit: 3, OpID: "op-2", Pick: pickAll("op-2"), At: at})
	if err != nil || len(second.Tiles) != 3 || second.Tiles[0].ID != ids[3] {
		t.Fatalf("claim with At %+v, %v; want tiles 3-5, after At's cursor", second, err)
	}
	if calls != 1 || held != 1 {
		t.Errorf("At called %d times, with %d connections held; want once, with the claim's connection", calls, held)
	}
}
