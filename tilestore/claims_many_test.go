package tilestore_test

import (
	"context"
	"slices"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// pickEvery cuts the candidates into batches of n tiles, the first under
// ops[0], and leaves those past len(ops) batches out.
func pickEvery(n int, ops ...string) func([]tilestore.Tile) ([]tilestore.Batch, []tilestore.Rejection) {
	return func(c []tilestore.Tile) ([]tilestore.Batch, []tilestore.Rejection) {
		var bs []tilestore.Batch
		for i, op := range ops {
			if i*n >= len(c) {
				break
			}
			b, _ := pickAll(op)(c[i*n : min((i+1)*n, len(c))])
			bs = append(bs, b)
		}
		return bs, nil
	}
}

// openOp is the batch a tile's row names as the one it is in.
func openOp(t *testing.T, s *tilestore.Store, id string) string {
	t.Helper()
	var op *string
	if err := s.Pool().QueryRow(context.Background(), `SELECT open_op_id FROM tiles WHERE tile_id = $1`, id).Scan(&op); err != nil {
		t.Fatal(err)
	}
	if op == nil {
		return ""
	}
	return *op
}

// One claim transaction may form several batches: each is journaled as
// its own batch, under its own key, its members marked with it, so each
// settles (and is resent, adopted, looked up) as a batch claimed alone
// would; the candidates none took are free for the next claim.
func TestAClaimOfSeveralBatchesJournalsEachUnderItsOwnKey(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FM", 10)
	c := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FM", Limit: 9, OpID: "op-a",
		PickMany: pickEvery(4, "op-a", "op-b")})
	if c.Batch.OpID != "op-a" || !slices.Equal(c.Batch.TileIDs, ids[:4]) || len(c.Tiles) != 4 {
		t.Fatalf("first batch %s %v (%d tiles), want op-a %v", c.Batch.OpID, c.Batch.TileIDs, len(c.Tiles), ids[:4])
	}
	if len(c.More) != 1 || c.More[0].Batch.OpID != "op-b" || !slices.Equal(c.More[0].Batch.TileIDs, ids[4:8]) ||
		len(c.More[0].Tiles) != 4 || c.More[0].Tiles[0].ID != ids[4] {
		t.Fatalf("more batches %+v, want op-b with %v", c.More, ids[4:8])
	}
	if c.Candidates != 9 || c.Left != 1 || c.Last.ID != ids[7] {
		t.Fatalf("candidates %d, left %d, last %q; want 9, 1 and %s", c.Candidates, c.Left, c.Last.ID, ids[7])
	}
	for i, id := range ids {
		want := map[bool]string{true: "op-a", false: "op-b"}[i < 4]
		if i >= 8 {
			want = ""
		}
		if got := openOp(t, s, id); got != want {
			t.Errorf("tile %s is in batch %q, want %q", id, got, want)
		}
	}
	open, err := s.OpenBatches(ctx, "FM")
	if err != nil || len(open) != 2 {
		t.Fatalf("open batches %v, %v; want op-a and op-b", open, err)
	}
	// op-b settles alone: op-a's tiles stay in op-a.
	if err := s.SettleBatch(ctx, tilestore.Settlement{OpID: "op-b", Uploaded: c.More[0].Batch.TileIDs}); err != nil {
		t.Fatal(err)
	}
	if got := openOp(t, s, ids[0]); got != "op-a" {
		t.Fatalf("after op-b settled, tile %s is in batch %q, want op-a", ids[0], got)
	}
	for _, id := range ids[4:8] {
		if r := readTile(t, s, id); r.UploadedAt == nil || openOp(t, s, id) != "" {
			t.Fatalf("tile %s of the settled op-b: uploaded %v, in batch %q", id, r.UploadedAt, openOp(t, s, id))
		}
	}
	next := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FM", Limit: 9, OpID: "op-c", Pick: pickAll("op-c")})
	if !slices.Equal(next.Batch.TileIDs, ids[8:]) {
		t.Fatalf("the next claim took %v, want the two left %v", next.Batch.TileIDs, ids[8:])
	}
}

// A PickMany that puts a tile in two batches, or forms two under one key,
// journals nothing; a sequenced claim cannot form several.
func TestAClaimOfSeveralBatchesThatOverlapJournalsNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FO", 4)
	for name, pm := range map[string]func([]tilestore.Tile) ([]tilestore.Batch, []tilestore.Rejection){
		"a tile in two": func(c []tilestore.Tile) ([]tilestore.Batch, []tilestore.Rejection) {
			a, _ := pickAll("op-1")(c[:2])
			b, _ := pickAll("op-2")(c[1:])
			return []tilestore.Batch{a, b}, nil
		},
		"one key twice": func(c []tilestore.Tile) ([]tilestore.Batch, []tilestore.Rejection) {
			a, _ := pickAll("op-1")(c[:2])
			b, _ := pickAll("op-1")(c[2:])
			return []tilestore.Batch{a, b}, nil
		},
	} {
		if _, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FO", Limit: 4, OpID: "op-1", PickMany: pm}); err == nil {
			t.Errorf("%s: the claim succeeded", name)
		}
	}
	if _, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FO", Limit: 4, OpID: "op-1", Stream: 1,
		PickMany: pickEvery(2, "op-1", "op-2")}); err == nil {
		t.Error("a sequenced claim formed several batches")
	}
	again := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FO", Limit: 4, OpID: "op-3", Pick: pickAll("op-3")})
	if !slices.Equal(again.Batch.TileIDs, ids) {
		t.Fatalf("after the refused claims, a claim took %v, want every tile %v", again.Batch.TileIDs, ids)
	}
}

// Concurrent claims of several batches each, beside claims of one, still
// put every tile in exactly one batch.
func TestConcurrentClaimsOfSeveralBatchesPutEveryTileInExactlyOneBatch(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	concurrentClaimsWith(t, s, func(op string) tilestore.Claim {
		if op[len(op)-1]%2 == 0 {
			return tilestore.Claim{Limit: 7, OpID: op, Pick: pickAll(op)}
		}
		return tilestore.Claim{Limit: 12, OpID: op, PickMany: pickEvery(3, op, op+"-b", op+"-c")}
	})
}
