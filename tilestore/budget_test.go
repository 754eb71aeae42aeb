package tilestore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// countAll counts the flight's uncounted rejections into its tiles'
// attempts with a budget none reaches.
func countAll(t testing.TB, s *tilestore.Store, flight string) {
	t.Helper()
	if _, err := s.CountRejectionsUpTo(context.Background(), flight, 1<<30, 0, "", nil); err != nil {
		t.Fatal(err)
	}
}

// AtBudget lists a flight's uploadable tiles whose counted attempts since
// their last requeue plus their uncounted rejections reach the budget,
// in tile_id order: whichever side brings them there, and no tile of
// another flight, uploaded, or requeued since.
func TestAtBudgetListsTheFlightsUploadableTilesWhoseRejectionsReachTheBudget(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FA", 8)
	other := seedFlight(t, s, "FO", 2)
	const budget = 3
	// Three counted rejections each for ids[0] (at budget on its own, as
	// after the budget was lowered) and ids[6] (uploaded since), two for
	// ids[1] and ids[2].
	for i, op := range []string{"op-a1", "op-a2", "op-a3"} {
		some := []string{ids[0], ids[6]}
		if i < 2 {
			some = append(some, ids[1], ids[2])
		}
		reject(t, s, op, "bad_tile", some...)
		countAll(t, s, "FA")
	}
	setStatusSQL(t, s, "uploaded", ids[6])
	// ids[5] reaches the budget, gives up and is requeued: its budget
	// counts from there.
	for _, op := range []string{"op-g1", "op-g2", "op-g3"} {
		reject(t, s, op, "bad_tile", ids[5])
	}
	if res, err := s.CountRejectionsUpTo(ctx, "FA", budget, 0, "", nil); err != nil || len(res.GaveUp) != 1 {
		t.Fatalf("count at budget %d: %+v, %v; want %s given up", budget, res, err, ids[5])
	}
	if _, err := s.Requeue(ctx, "FA", []string{ids[5]}, false, nil); err != nil {
		t.Fatal(err)
	}
	// Uncounted: one more for ids[1] (2 + 1) and ids[5] (0 + 1 since its
	// requeue), three for ids[3] and for a tile of the other flight.
	reject(t, s, "op-u1", "bad_tile", ids[1], ids[3], ids[5])
	for _, op := range []string{"op-u2", "op-u3"} {
		reject(t, s, op, "bad_tile", ids[3])
	}
	for _, op := range []string{"op-o1", "op-o2", "op-o3"} {
		reject(t, s, op, "bad_tile", other[0])
	}

	got, err := s.AtBudget(ctx, "FA", budget)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ids[0], ids[1], ids[3]}; !slices.Equal(got, want) {
		t.Errorf("AtBudget(FA, %d) = %v, want %v", budget, got, want)
	}
	if got, err := s.AtBudget(ctx, "FA", 4); err != nil || len(got) != 0 {
		t.Errorf("AtBudget(FA, 4) = %v, %v; want none", got, err)
	}
	if got, err := s.AtBudget(ctx, "FO", budget); err != nil || !slices.Equal(got, other[:1]) {
		t.Errorf("AtBudget(FO, %d) = %v, %v; want %v", budget, got, err, other[:1])
	}
}

// AtBudget runs as an upload starts, on a flight of any size. Only a
// tile a rejection names can be at its budget, so it reads those and no
// other tile of the flight, however many there are, with the plan a
// parameterised statement gets at first (custom) and later (generic),
// whether rejections are few or a third of the flight has one.
func TestAtBudgetReadsOnlyTheTilesARejectionNames(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	const n = 20000
	for _, f := range []string{"FB", "FC"} {
		if _, err := s.UpsertFlight(ctx, f, tilestore.FlightOnGround); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `
INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at, voting_status)
SELECT $1 || '-' || lpad(g::text, 8, '0'), $1, 18, g, 7, 'image/png', 20000,
       md5(g::text) || md5((g + 1)::text), $1 || '/18/' || g || '/7.png',
       now(), CASE WHEN g % 10 = 0 THEN 'uploaded' ELSE 'pending' END
  FROM generate_series(1, $2::int) AS g`, f, n); err != nil {
			t.Fatal(err)
		}
	}
	// record records, under op, a rejection of each pending tile for
	// which where holds, as a settlement does.
	record := func(op, where string) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, `INSERT INTO upload_rejections (op_id, tile_id, reason, message)
SELECT $1, tile_id, 'bad_tile', 'rejected' FROM tiles WHERE voting_status = 'pending' AND `+where, op); err != nil {
			t.Fatal(err)
		}
	}
	// In each flight, a few dozen tiles rejected and counted once, a
	// third of them rejected once more, uncounted, and 5 tiles rejected
	// three times, uncounted: the only tiles at a budget of 3.
	record("op-1", `right(tile_id, 8)::int % 600 = 1`)
	countAll(t, s, "FB")
	countAll(t, s, "FC")
	record("op-2", `right(tile_id, 8)::int % 1800 = 1`)
	for i := range 3 {
		record(fmt.Sprintf("op-3-%d", i), `right(tile_id, 8)::int BETWEEN 100 AND 105`)
	}
	check := func(t *testing.T) {
		if _, err := s.Pool().Exec(ctx, `ANALYZE tiles; ANALYZE upload_rejections`); err != nil {
			t.Fatal(err)
		}
		var named float64
		if err := s.Pool().QueryRow(ctx, `SELECT count(DISTINCT tile_id) FROM upload_rejections`).Scan(&named); err != nil {
			t.Fatal(err)
		}
		got, err := s.AtBudget(ctx, "FB", 3)
		if err != nil || len(got) != 5 {
			t.Fatalf("AtBudget(FB, 3) = %v, %v; want the 5 tiles rejected three times", got, err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explainAtBudget(t, ctx, s, mode)
			top, _ := plan[0]["Plan"].(map[string]any)
			if read := tilesRead(top); read > named {
				t.Errorf("%s: the plan read %v rows of tiles, want at most the %v tiles a rejection names "+
					"(of a flight of %d):\n%v", mode, read, named, n, plan)
			}
		}
	}
	t.Run("few rejections", check)
	// A third of FB's pending tiles rejected once more and counted.
	record("op-4", `flight_id = 'FB' AND right(tile_id, 8)::int % 3 = 0`)
	countAll(t, s, "FB")
	t.Run("a third of the flight rejected", check)
}

// explainAtBudget returns the plan, run, of AtBudget's statement for
// flight FB and a budget of 3, prepared under plan_cache_mode mode.
func explainAtBudget(t *testing.T, ctx context.Context, s *tilestore.Store, mode string) []map[string]any {
	t.Helper()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var plan []map[string]any
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
		t.Fatal(err)
	}
	// A prepared statement outlives the transaction: it is
	// dropped before the connection goes back to the pool.
	if _, err := tx.Exec(ctx, `PREPARE at_budget(text, int) AS `+tilestore.AtBudgetSQL); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE at_budget('FB', 3)`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DEALLOCATE at_budget`); err != nil {
		t.Fatal(err)
	}
	return plan
}

// tilesRead is the rows the plan node and those below it read from
// tiles: each scan's rows out and those its filters removed, times its
// loops.
func tilesRead(node map[string]any) float64 {
	var read float64
	if node["Relation Name"] == "tiles" {
		f := func(k string) float64 { v, _ := node[k].(float64); return v }
		read = (f("Actual Rows") + f("Rows Removed by Filter") + f("Rows Removed by Index Recheck")) * f("Actual Loops")
	}
	subs, _ := node["Plans"].([]any)
	for _, sub := range subs {
		if m, ok := sub.(map[string]any); ok {
			read += tilesRead(m)
		}
	}
	return read
}
