package pgtest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

// A requeued tile has a fresh budget counted from its budget_base (migration
// 0006): rejections under the budget after the requeue are legitimate, and
// only a tile rejected by more keys than its base plus the budget breaks the
// invariant.
func TestRejectionsOverBudgetCountsARequeuedTilesBudgetFromItsBase(t *testing.T) {
	t.Parallel()
	const flight, budget = "F1", 2
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, _ := pgtest.New(t)
	s := tilestore.NewStore(pool)
	if _, err := s.UpsertFlight(ctx, flight, tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	var tiles []tilestore.Tile
	for i, id := range []string{"requeued-ok", "requeued-over", "never-requeued-over"} {
		h := sha256.Sum256([]byte(id))
		tiles = append(tiles, tilestore.Tile{ID: id, FlightID: flight, Z: 18, X: int64(i), Y: 7, ContentType: "image/png",
			SizeBytes: 100, SHA256: hex.EncodeToString(h[:]), BlobPath: fmt.Sprintf("%s/18/%d/7.png", flight, i),
			CapturedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)})
	}
	if _, err := s.InsertTiles(ctx, tiles); err != nil {
		t.Fatal(err)
	}
	op := 0
	reject := func(id string, times int) {
		t.Helper()
		for range times {
			op++
			providertest.RejectUnsent(t, ctx, s, flight, fmt.Sprintf("op-%d", op), id, "invalid_tile", "bad")
		}
		if _, err := s.CountRejectionsUpTo(ctx, flight, budget, 0, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	// Both requeued tiles spend their budget, are given up and requeued.
	reject("requeued-ok", budget)
	reject("requeued-over", budget)
	if _, err := s.Requeue(ctx, flight, []string{"requeued-ok", "requeued-over"}, false, nil); err != nil {
		t.Fatal(err)
	}
	reject("requeued-ok", budget)     // its fresh budget, spent again: legitimate
	reject("requeued-over", budget+1) // one key past its fresh budget
	reject("never-requeued-over", budget+1)

	over, err := pgtest.RejectionsOverBudget(ctx, pool, flight, budget)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"requeued-over": 2*budget + 1, "never-requeued-over": budget + 1}
	if !maps.Equal(over, want) {
		t.Fatalf("over budget: %v, want %v (requeued-ok was rejected %d times after its requeue, within its fresh budget)",
			over, want, budget)
	}
}
