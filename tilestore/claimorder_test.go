package tilestore_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tilectl/tilectl/tilestore"
)

// seedPyramid creates a flight (on ground) with min(4^z, perZoom) pending
// tiles at each zoom 0..maxZ, whose IDs are random: their tile_id order
// says nothing of their zoom. It returns the tiles.
func seedPyramid(t testing.TB, s *tilestore.Store, flight string, maxZ, perZoom int, seed uint64) []tilestore.Tile {
	t.Helper()
	ctx := testCtx(t)
	if _, err := s.UpsertFlight(ctx, flight, tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	var tiles []tilestore.Tile
	for z := 0; z <= maxZ; z++ {
		for i := range min(1<<(2*z), perZoom) {
			id := fmt.Sprintf("%s-%08x", flight, rng.Uint32())
			x, y := int64(i%(1<<z)), int64(i/(1<<z))
			tiles = append(tiles, tilestore.Tile{ID: id, FlightID: flight, Z: z, X: x, Y: y,
				ContentType: "image/png", SizeBytes: 100, SHA256: sum(id),
				BlobPath:   fmt.Sprintf("%s/%d/%d/%d.png", flight, z, x, y),
				CapturedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)})
		}
	}
	if n, err := s.InsertTiles(ctx, tiles); err != nil || n != len(tiles) {
		t.Fatalf("seed %d tiles: inserted %d, %v", len(tiles), n, err)
	}
	return tiles
}

// inOrder returns the tiles' IDs sorted as o claims them.
func inOrder(tiles []tilestore.Tile, o tilestore.Order) []string {
	ts := slices.Clone(tiles)
	slices.SortFunc(ts, func(a, b tilestore.Tile) int {
		switch {
		case o.Less(tilestore.CursorOf(a), tilestore.CursorOf(b)):
			return -1
		case o.Less(tilestore.CursorOf(b), tilestore.CursorOf(a)):
			return 1
		}
		return 0
	})
	ids := make([]string, len(ts))
	for i, tl := range ts {
		ids[i] = tl.ID
	}
	return ids
}

// claimAll claims the flight batch after batch, each after the last's
// cursor, settles each as uploaded, and returns the tiles in claim order.
func claimAll(t *testing.T, s *tilestore.Store, flight string, o tilestore.Order, limit int) []string {
	t.Helper()
	ctx := testCtx(t)
	var got []string
	var after tilestore.Cursor
	for k := 0; ; k++ {
		op := fmt.Sprintf("op-%s-%d", flight, k)
		c := mustClaim(t, ctx, s, tilestore.Claim{FlightID: flight, Limit: limit, OpID: op, Pick: pickAll(op), Order: o, After: after})
		if c.Candidates == 0 {
			return got
		}
		for _, tl := range c.Tiles {
			got = append(got, tl.ID)
		}
		after = c.Last
		if err := s.SettleBatch(ctx, tilestore.Settlement{OpID: op, Uploaded: c.Batch.TileIDs, HTTPStatus: 200}); err != nil {
			t.Fatal(err)
		}
	}
}

// Claims take a flight zoom by zoom, and within a zoom by tile ID; with
// OrderID they take it by tile ID alone, as before there was a choice.
func TestClaimsTakeAFlightLowestZoomFirstThenByTileIDOrByIDAlone(t *testing.T) {
	t.Parallel()
	for _, o := range []tilestore.Order{tilestore.OrderZoom, "", tilestore.OrderID} {
		t.Run("order="+string(o), func(t *testing.T) {
			t.Parallel()
			s := newStore(t).ForRun(tilestore.Run{ID: "run-z", Lease: time.Minute})
			tiles := seedPyramid(t, s, "FZ", 5, 40, 7)
			want := inOrder(tiles, o)
			if o != tilestore.OrderID && slices.Equal(want, inOrder(tiles, tilestore.OrderID)) {
				t.Fatal("the seeded tiles' ID order is their zoom order: the test would prove nothing")
			}
			got := claimAll(t, s, "FZ", o, 7)
			if !slices.Equal(got, want) {
				t.Fatalf("claims took\n %q\nwant\n %q", got, want)
			}
		})
	}
}

// Several runs claiming at once: a claim that starts after another one's
// commit takes only tiles after all of that one's, in (z, tile_id) order,
// whichever run made them; so no tile of zoom z+1 is claimed while one of
// zoom z that nobody has claimed could be. Every tile is claimed once.
func TestConcurrentRunsClaimEveryZoomBeforeTheNext(t *testing.T) {
	t.Parallel()
	base := newStore(t)
	tiles := seedPyramid(t, base, "FC", 5, 120, 11)
	z := map[string]int{}
	for _, tl := range tiles {
		z[tl.ID] = tl.Z
	}
	type claimSpan struct {
		start, end  time.Time
		first, last tilestore.Cursor
		run         int
	}
	var (
		mu    sync.Mutex
		spans []claimSpan
		seen  = map[string]int{}
		wg    sync.WaitGroup
	)
	ctx := testCtx(t)
	for r := range 2 {
		st := base.ForRun(tilestore.Run{ID: fmt.Sprintf("run-%d", r), Lease: time.Minute})
		for w := range 2 {
			wg.Go(func() {
				var after tilestore.Cursor
				for k := 0; ; k++ {
					op := fmt.Sprintf("op-%d-%d-%d", r, w, k)
					start := time.Now()
					c, err := st.ClaimBatch(ctx, tilestore.Claim{FlightID: "FC", Limit: 5, OpID: op, Pick: pickAll(op), After: after})
					end := time.Now()
					if err != nil {
						t.Error(err)
						return
					}
					if c.Candidates == 0 {
						if after.IsZero() {
							return
						}
						after = tilestore.Cursor{} // once more from the first tile
						continue
					}
					after = c.Last
					mu.Lock()
					spans = append(spans, claimSpan{start, end, tilestore.CursorOf(c.Tiles[0]), c.Last, r})
					for _, tl := range c.Tiles {
						seen[tl.ID]++
					}
					mu.Unlock()
					if err := st.SettleBatch(ctx, tilestore.Settlement{OpID: op, Uploaded: c.Batch.TileIDs, HTTPStatus: 200}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if len(seen) != len(tiles) {
		t.Fatalf("%d tiles claimed, want all %d", len(seen), len(tiles))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("tile %s claimed %d times", id, n)
		}
	}
	runs := map[int]bool{}
	for _, a := range spans {
		runs[a.run] = true
		for _, b := range spans {
			if a.end.Before(b.start) && !tilestore.OrderZoom.Less(a.last, b.first) {
				t.Errorf("a claim of run %d that started after one of run %d ended took %v (zoom %d) first, not after that one's last %v (zoom %d)",
					b.run, a.run, b.first, z[b.first.ID], a.last, z[a.last.ID])
			}
		}
	}
	if len(runs) != 2 {
		t.Errorf("claims made by %d run(s), want both", len(runs))
	}
}

// A tile of a lower zoom that comes back pending after its batch failed is
// claimed, once the run's lookup found it not held, before any further
// tile of a higher zoom; while it awaits that lookup no run claims it and
// the higher zooms go on.
func TestAFailedLowerZoomTileIsClaimedBeforeFurtherHigherZoomTiles(t *testing.T) {
	t.Parallel()
	s := newStore(t).ForRun(tilestore.Run{ID: "run-f", Lease: time.Minute})
	ctx := testCtx(t)
	tiles := seedPyramid(t, s, "FF", 3, 16, 5) // 1 + 4 + 16 + 16 tiles
	want := inOrder(tiles, tilestore.OrderZoom)
	zoom := map[string]int{}
	for _, tl := range tiles {
		zoom[tl.ID] = tl.Z
	}
	// The first batch: zoom 0 and the first two tiles of zoom 1. It fails.
	first := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FF", Limit: 3, OpID: "op-1", Pick: pickAll("op-1")})
	if got := first.Batch.TileIDs; !slices.Equal(got, want[:3]) {
		t.Fatalf("first claim %q, want %q", got, want[:3])
	}
	second := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FF", Limit: 3, OpID: "op-2", Pick: pickAll("op-2"), After: first.Last})
	if got := second.Batch.TileIDs; !slices.Equal(got, want[3:6]) {
		t.Fatalf("second claim %q, want %q", got, want[3:6])
	}
	if err := s.FailBatch(ctx, "op-1", 503, "unavailable"); err != nil {
		t.Fatal(err)
	}
	// Awaiting a lookup: not claimed, and zoom 2 goes on, even from the
	// first tile.
	waiting := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FF", Limit: 2, OpID: "op-3", Pick: pickAll("op-3")})
	if got := waiting.Batch.TileIDs; !slices.Equal(got, want[6:8]) {
		t.Fatalf("a claim while the failed tiles await a lookup took %q, want %q", got, want[6:8])
	}
	// The run's lookup finds them not held: its next claim from the first
	// tile takes them before any further zoom-2 tile.
	amb, asOf, err := s.AmbiguousPending(ctx, "FF")
	if err != nil || len(amb) != 3 {
		t.Fatalf("awaiting a lookup: %d tiles, %v; want the failed batch's 3", len(amb), err)
	}
	var looked []string
	for _, tl := range amb {
		looked = append(looked, tl.ID)
	}
	again := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FF", Limit: 4, OpID: "op-4", Pick: pickAll("op-4"),
		LookedUp: looked, LookedUpAt: asOf})
	wantAgain := append(slices.Clone(want[:3]), want[8])
	if got := again.Batch.TileIDs; !slices.Equal(got, wantAgain) {
		t.Fatalf("the claim after the lookup took %q, want the failed %q and then the next zoom-2 tile", got, wantAgain)
	}
	for _, id := range again.Batch.TileIDs[:3] {
		if zoom[id] > 1 {
			t.Errorf("tile %s of zoom %d taken before the failed ones", id, zoom[id])
		}
	}
}

// The claim in zoom order reads its candidates through the index that
// holds them in that order, from its cursor on (the cursor is the index
// condition); without it a claim sorts every pending tile of the flight.
func TestAClaimInZoomOrderReadsTheZoomOrderIndex(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	seedPyramid(t, s, "FP", 4, 64, 3)
	if _, err := s.Pool().Exec(ctx, "ANALYZE tiles"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		order tilestore.Order
		index string
	}{
		{tilestore.OrderZoom, "tiles_claim_zoom_idx"},
		// On one small flight the planner may as well read the primary
		// key: what matters is that it sorts no candidates.
		{tilestore.OrderID, ""},
	} {
		err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
				return err
			}
			args := []any{"FP", 20, 5, []string{}, []string{}, time.Now(), "FP-0", "op"}
			if c.order == tilestore.OrderZoom {
				args = append(args, 2)
			}
			plan, err := explain(ctx, tx, tilestore.ClaimMarkSQL(c.order), args...)
			if err != nil {
				return err
			}
			// One sort: of the few rows marked, never of the candidates.
			if !strings.Contains(plan, "Index Scan using "+c.index) || strings.Count(plan, "Sort Key") != 1 ||
				c.order == tilestore.OrderZoom && !strings.Contains(plan, "ROW(z, tile_id) > ROW(") {
				t.Errorf("order %s: the claim does not read %s in order:\n%s", c.order, c.index, plan)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// markByKey matches a claim's plan whose mark reads tiles_pkey with the
// candidates' keys.
var markByKey = regexp.MustCompile(`(?s)Update on tiles .*Index Scan using tiles_pkey on tiles \w+ [^\n]*\n\s+Index Cond: \(tile_id = ANY \(\$\d+\)\)`)

// The claim's statement runs on a plan made once per connection, without
// its values (claimTx): that plan still reads the flight's candidates in
// the claim's order from the cursor on, through the index that holds them
// in that order (one sort, of the few rows marked), finds the candidates
// it marks again through the primary key (claimMarkSQL marks by key), and
// is not compiled (JIT), on a table of several flights.
func TestTheClaimsGenericPlanReadsTheOrdersIndex(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	seedPyramid(t, s, "FG", 7, 2000, 5)
	seedFlight(t, s, "FH", 20000)
	if _, err := s.Pool().Exec(ctx, "ANALYZE tiles"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		order tilestore.Order
		index string
		after string // the cursor's condition in the index scan
		args  string // the claim's values, as SQL literals
	}{
		{tilestore.OrderZoom, "tiles_claim_zoom_idx", "ROW(z, tile_id) > ROW($9, $7)",
			"'FG', 64, 5, '{}'::text[], '{}'::text[], now(), 'FG-0', 'op-z', 2"},
		{tilestore.OrderID, "", "tile_id > $7",
			"'FG', 64, 5, '{}'::text[], '{}'::text[], now(), 'FG-0', 'op-i'"},
	} {
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = func() error {
			defer conn.Release()
			tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: tilestore.ClaimTxBegin})
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			// Whatever the flight's size, JIT would compile any plan now
			// but for the claim's own setting.
			if _, err := tx.Exec(ctx, "SET LOCAL jit_above_cost = 0"); err != nil {
				return err
			}
			name := "claim_" + string(c.order)
			if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+tilestore.ClaimMarkSQL(c.order), pgx.QueryExecModeSimpleProtocol); err != nil {
				return err
			}
			plan, err := explain(ctx, tx, "(ANALYZE) EXECUTE "+name+"("+c.args+")", pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				return err
			}
			if !strings.Contains(plan, "Index Scan using "+c.index) || strings.Count(plan, "Sort Key") != 1 ||
				!strings.Contains(plan, c.after) || strings.Contains(plan, "JIT") {
				t.Errorf("order %s: the claim's generic plan does not read %s in order from the cursor, or is compiled:\n%s",
					c.order, c.index, plan)
			}
			if !markByKey.MatchString(plan) {
				t.Errorf("order %s: the claim's generic plan does not find the candidates it marks through tiles_pkey:\n%s",
					c.order, plan)
			}
			return nil
		}()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestAClaimReadsNoTilesUncountedRejectionsWhenThereAreNone: a claim with
// a budget leaves out the tiles whose attempts and uncounted rejections
// reach it. Uncounted rejections are few and short-lived (the next count
// takes them), so a claim looks once whether there are any before it
// counts a candidate's: with none, it reads none per candidate.
func TestAClaimReadsNoTilesUncountedRejectionsWhenThereAreNone(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	seedFlight(t, s, "FU", 2000)
	if _, err := s.Pool().Exec(ctx, "ANALYZE tiles"); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Pool().BeginTx(ctx, pgx.TxOptions{BeginQuery: tilestore.ClaimTxBegin})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "PREPARE claim AS "+tilestore.ClaimMarkSQL(tilestore.OrderZoom), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	plan, err := explain(ctx, tx, "(ANALYZE) EXECUTE claim('FU', 64, 5, '{}'::text[], '{}'::text[], now(), '', 'op-u', -1)",
		pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "rows=64 ") {
		t.Fatalf("the claim did not take 64 tiles:\n%s", plan)
	}
	for _, m := range regexp.MustCompile(`upload_rejections_uncounted_idx[^\n]*loops=(\d+)`).FindAllStringSubmatch(plan, -1) {
		if m[1] != "1" {
			t.Errorf("the claim read the uncounted rejections %s times, once per candidate, with none there:\n%s", m[1], plan)
		}
	}
}
