package tilestore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/migrations"
	"github.com/tilectl/tilectl/tilestore"
)

// pickAll puts every candidate in one batch under op.
func pickAll(op string) func([]tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
	return func(c []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
		b := tilestore.Batch{OpID: op, Fingerprint: "fp-" + op}
		for _, t := range c {
			b.TileIDs, b.SHA256s = append(b.TileIDs, t.ID), append(b.SHA256s, t.SHA256)
		}
		return b, nil
	}
}

// mustClaim claims a batch by cl from s and fails the test on an error.
func mustClaim(t *testing.T, ctx context.Context, s *tilestore.Store, cl tilestore.Claim) tilestore.Claimed {
	t.Helper()
	c, err := s.ClaimBatch(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Concurrent claims put every tile in exactly one batch, also on a server
// whose default isolation is stricter than READ COMMITTED (a claim sets its
// own: under REPEATABLE READ a claim that met a row another claim had
// marked failed with a serialization error).
func TestConcurrentClaimsPutEveryTileInExactlyOneBatch(t *testing.T) {
	t.Parallel()
	for _, isolation := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(isolation, " ", "-"), func(t *testing.T) {
			t.Parallel()
			concurrentClaims(t, storeWithIsolation(t, isolation))
		})
	}
}

// storeWithIsolation is a Store on a fresh database whose connections'
// default_transaction_isolation is isolation.
func storeWithIsolation(t *testing.T, isolation string) *tilestore.Store {
	t.Helper()
	_, url := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = isolation
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return tilestore.NewStore(pool)
}

func concurrentClaims(t *testing.T, s *tilestore.Store) {
	ids := seedFlight(t, s, "FC", 600)
	ctx := testCtx(t)
	const runs, workers = 4, 3
	var (
		mu    sync.Mutex
		owner = map[string]string{} // tile -> op
		ops   atomic.Int64
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for r := range runs {
		st := s.ForRun(tilestore.Run{ID: fmt.Sprintf("run-%d", r), Lease: time.Minute})
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; ; i++ {
					op := fmt.Sprintf("op-%d-%d-%d", r, w, i)
					c, err := st.ClaimBatch(ctx, tilestore.Claim{FlightID: "FC", Limit: 7, OpID: op, Pick: pickAll(op)})
					if err != nil {
						t.Error(err)
						return
					}
					if c.Candidates == 0 {
						return
					}
					ops.Add(1)
					mu.Lock()
					for _, tl := range c.Tiles {
						if prev, dup := owner[tl.ID]; dup {
							t.Errorf("tile %s claimed by %s and %s", tl.ID, prev, op)
						}
						owner[tl.ID] = op
					}
					mu.Unlock()
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if len(owner) != len(ids) {
		t.Fatalf("%d tiles claimed, want %d", len(owner), len(ids))
	}
	var inTwo int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT unnest(tile_ids) AS id FROM upload_batches
		WHERE state = 'open' GROUP BY 1 HAVING count(*) > 1) d`).Scan(&inTwo); err != nil {
		t.Fatal(err)
	}
	if inTwo != 0 {
		t.Fatalf("%d tiles are in two open batches", inTwo)
	}
	if n, _, err := s.PendingSummary(ctx, "FC"); err != nil || n != len(ids) {
		t.Fatalf("pending for a run that holds nothing = %d (%v), want %d: a tile in another run's live batch is still pending", n, err, len(ids))
	}
	t.Logf("%d batches claimed by %d runs x %d workers", ops.Load(), runs, workers)
}

func TestALiveOwnersBatchIsNeverAdoptedAndAnExpiredOnesIsAdoptedByExactlyOneRun(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	seedFlight(t, s, "FL", 4)
	ctx := testCtx(t)
	live := s.ForRun(tilestore.Run{ID: "live", Lease: time.Hour})
	dead := s.ForRun(tilestore.Run{ID: "dead", Lease: 50 * time.Millisecond})
	if _, err := live.ClaimBatch(ctx, tilestore.Claim{FlightID: "FL", Limit: 2, OpID: "op-live", Pick: pickAll("op-live")}); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.ClaimBatch(ctx, tilestore.Claim{FlightID: "FL", Limit: 2, OpID: "op-dead", Pick: pickAll("op-dead")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the dead run's lease runs out; nobody renews it
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		adopted = map[string][]string{}
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprintf("adopter-%d", i)
			bs, err := s.ForRun(tilestore.Run{ID: run, Lease: time.Hour}).AdoptOpenBatches(ctx, "FL", nil)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, b := range bs {
				adopted[b.OpID] = append(adopted[b.OpID], run)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(adopted["op-live"]) != 0 {
		t.Errorf("a live owner's batch was adopted by %v", adopted["op-live"])
	}
	if len(adopted["op-dead"]) != 1 {
		t.Fatalf("the expired batch was adopted by %v, want exactly one run", adopted["op-dead"])
	}
	// The dead run, back from a freeze, no longer owns it: it must not send.
	if err := dead.NoteSend(ctx, "op-dead"); !errors.Is(err, tilestore.ErrNotOwner) {
		t.Errorf("NoteSend by the former owner: %v, want ErrNotOwner", err)
	}
	if err := live.NoteSend(ctx, "op-live"); err != nil {
		t.Errorf("NoteSend by the live owner: %v", err)
	}
}

func TestSettlingOrFailingABatchFreesItsTilesForTheNextClaim(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ids := seedFlight(t, s, "FS", 4)
	ctx := testCtx(t)
	c1 := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FS", Limit: 2, OpID: "op-1", Pick: pickAll("op-1")})
	c2 := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FS", Limit: 2, OpID: "op-2", Pick: pickAll("op-2")})
	if c, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FS", Limit: 2, OpID: "op-x", Pick: pickAll("op-x")}); err != nil || c.Candidates != 0 {
		t.Fatalf("third claim: %+v %v, want nothing left", c, err)
	}
	// op-1: one uploaded, one rejected.
	if err := s.SettleBatch(ctx, tilestore.Settlement{OpID: "op-1", Uploaded: []string{c1.Batch.TileIDs[0]},
		Rejections: []tilestore.Rejection{{TileID: c1.Batch.TileIDs[1], Reason: "decode_error"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.FailBatch(ctx, "op-2", 422, "key unusable"); err != nil {
		t.Fatal(err)
	}
	// The rejected tile (one uncounted rejection) is left out at a budget
	// of 1, and when the caller excludes it; it is free below its budget.
	// The failed batch's tiles go again only once a lookup found them not held.
	_, asOf, err := s.AmbiguousPending(ctx, "FS")
	if err != nil {
		t.Fatal(err)
	}
	c3 := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FS", Limit: 10, MaxAttempts: 1, LookedUp: c2.Batch.TileIDs, LookedUpAt: asOf, OpID: "op-3", Pick: pickAll("op-3")})
	if fmt.Sprint(c3.Batch.TileIDs) != fmt.Sprint(c2.Batch.TileIDs) {
		t.Fatalf("after the fail, claimed %v, want the failed batch's %v (the rejected tile is at its budget)", c3.Batch.TileIDs, c2.Batch.TileIDs)
	}
	if err := s.FailBatch(ctx, "op-3", 422, "again"); err != nil {
		t.Fatal(err)
	}
	excl := append([]string{ids[1]}, c2.Batch.TileIDs...)
	if got, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FS", Limit: 10, MaxAttempts: 5, Exclude: excl, OpID: "op-never", Pick: pickAll("op-never")}); err != nil || got.Candidates != 0 {
		t.Fatalf("claim excluding every free tile: %+v %v, want nothing", got, err)
	}
	c4 := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FS", Limit: 10, MaxAttempts: 2, Exclude: c2.Batch.TileIDs, OpID: "op-4", Pick: pickAll("op-4")})
	if fmt.Sprint(c4.Batch.TileIDs) != fmt.Sprint([]string{ids[1]}) {
		t.Fatalf("claimed %v, want the rejected tile %s, below its budget", c4.Batch.TileIDs, ids[1])
	}
}

// Run A's batch fails (its key expired, say) while run B works: B's claims
// must not pick A's tiles, nor a tile rejected with an unclear reason, until
// B itself asked the provider about them and was told to send them.
func TestATileAwaitingLookUpIsNeverClaimedByAnotherRun(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ids := seedFlight(t, s, "FL", 6)
	ctx := testCtx(t)
	a := s.ForRun(tilestore.Run{ID: "run-a", Lease: time.Minute})
	b := s.ForRun(tilestore.Run{ID: "run-b", Lease: time.Minute})
	ca := mustClaim(t, ctx, a, tilestore.Claim{FlightID: "FL", Limit: 2, OpID: "op-a", Pick: pickAll("op-a")})
	cp := mustClaim(t, ctx, a, tilestore.Claim{FlightID: "FL", Limit: 1, OpID: "op-p", Pick: pickAll("op-p")})
	if err := a.FailBatch(ctx, "op-a", 422, "key expired"); err != nil {
		t.Fatal(err)
	}
	unclear := cp.Batch.TileIDs[0]
	if err := a.SettleBatch(ctx, tilestore.Settlement{OpID: "op-p",
		Rejections: []tilestore.Rejection{{TileID: unclear, Reason: "protocol_error"}}}); err != nil {
		t.Fatal(err)
	}
	awaiting := append(append([]string{}, ca.Batch.TileIDs...), unclear)
	cb := mustClaim(t, ctx, b, tilestore.Claim{FlightID: "FL", Limit: 10, OpID: "op-b", Pick: pickAll("op-b")})
	for _, id := range cb.Batch.TileIDs {
		if slices.Contains(awaiting, id) {
			t.Fatalf("run B claimed %v, including tile %s, which awaits a lookup (A's failed batch %v, unclear rejection %s)",
				cb.Batch.TileIDs, id, ca.Batch.TileIDs, unclear)
		}
	}
	if fmt.Sprint(cb.Batch.TileIDs) != fmt.Sprint(ids[3:]) {
		t.Fatalf("run B claimed %v, want the tiles no batch touched %v", cb.Batch.TileIDs, ids[3:])
	}
	// Once B's own lookup said "send" for one of them, that one (and only
	// that one) is claimable.
	sendable := ca.Batch.TileIDs[1]
	_, asOf, err := b.AmbiguousPending(ctx, "FL")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := b.ClaimBatch(ctx, tilestore.Claim{FlightID: "FL", Limit: 10,
		LookedUp: []string{sendable}, LookedUpAt: asOf, OpID: "op-b2", Pick: pickAll("op-b2")})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cl.Batch.TileIDs) != fmt.Sprint([]string{sendable}) {
		t.Fatalf("after the lookup, run B claimed %v, want only the looked-up tile %s", cl.Batch.TileIDs, sendable)
	}
}

// Many callers count the same flight's rejections at once: each rejection
// is added exactly once, and each give-up is reported to exactly one
// caller's beforeCommit (which writes its one FDR record).
func TestConcurrentCountersCountEachRejectionOnceAndReportEachGiveUpOnce(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	// The budget is spent in the last round: a claim (the only way a
	// rejection is recorded) never takes a tile that has given up.
	const tiles, rounds, callers, budget = 40, 6, 6, 12
	ids := seedFlight(t, s, "FK", tiles)
	ctx := testCtx(t)
	var mu sync.Mutex
	giveUps := map[string]int{}
	counted := 0
	for round := range rounds {
		// Every tile rejected twice in this round, under two operations.
		for k := range 2 {
			reject(t, s, fmt.Sprintf("op-%d-%d", round, k), "storage_busy", ids...)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := s.CountRejectionsUpTo(ctx, "FK", budget, 0, "", func(_ context.Context, gs []tilestore.GiveUp) error {
					mu.Lock()
					defer mu.Unlock()
					for _, g := range gs {
						giveUps[g.TileID]++
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				counted += res.Counted
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
	}
	if want := tiles * rounds * 2; counted != want {
		t.Errorf("counted %d rejections in all, want %d (each exactly once)", counted, want)
	}
	for _, id := range ids {
		if r := readTile(t, s, id); r.Attempts != rounds*2 || r.Status != "upload_giveup" {
			t.Errorf("tile %s: %d attempts, %s; want %d, upload_giveup", id, r.Attempts, r.Status, rounds*2)
		}
		if giveUps[id] != 1 {
			t.Errorf("tile %s gave up %d times, want once", id, giveUps[id])
		}
	}
}

// Run B's lookup said "send" for a tile; before B claims it, run A (whose
// own lookup said the same) sends it under a new key and that batch fails
// too, so the provider may now hold it. B's lookup is stale for that tile:
// its claim leaves it for a new lookup. And a tile in an open batch is not
// looked up at all while that batch may still store it.
func TestALookUpOlderThanTheTilesLatestFailureDoesNotLetItBeClaimed(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	seedFlight(t, s, "FR", 3)
	ctx := testCtx(t)
	a := s.ForRun(tilestore.Run{ID: "run-a", Lease: time.Minute})
	b := s.ForRun(tilestore.Run{ID: "run-b", Lease: time.Minute})
	first := mustClaim(t, ctx, a, tilestore.Claim{FlightID: "FR", Limit: 1, OpID: "op-1", Pick: pickAll("op-1")})
	tile := first.Batch.TileIDs[0]
	if err := a.FailBatch(ctx, "op-1", 422, "key expired"); err != nil {
		t.Fatal(err)
	}
	// Both runs read the tile as awaiting a lookup; both are told "send".
	amb, asOfB, err := b.AmbiguousPending(ctx, "FR")
	if err != nil || len(amb) != 1 || amb[0].ID != tile {
		t.Fatalf("ambiguous = %v, %v; want [%s]", amb, err, tile)
	}
	_, asOfA, err := a.AmbiguousPending(ctx, "FR")
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.ClaimBatch(ctx, tilestore.Claim{FlightID: "FR", Limit: 1, LookedUp: []string{tile}, LookedUpAt: asOfA, OpID: "op-2", Pick: pickAll("op-2")})
	if err != nil || fmt.Sprint(again.Batch.TileIDs) != fmt.Sprint([]string{tile}) {
		t.Fatalf("run A's claim after its lookup = %v, %v; want [%s]", again.Batch.TileIDs, err, tile)
	}
	// While op-2 is open nobody looks the tile up: op-2 may still store it.
	if amb, _, err := b.AmbiguousPending(ctx, "FR"); err != nil || len(amb) != 0 {
		t.Fatalf("ambiguous while op-2 is open = %v, %v; want none", amb, err)
	}
	if err := a.FailBatch(ctx, "op-2", 422, "key expired"); err != nil {
		t.Fatal(err)
	}
	stale := mustClaim(t, ctx, b, tilestore.Claim{FlightID: "FR", Limit: 10, LookedUp: []string{tile}, LookedUpAt: asOfB, OpID: "op-3", Pick: pickAll("op-3")})
	if slices.Contains(stale.Batch.TileIDs, tile) {
		t.Fatalf("run B claimed %v with a lookup older than the tile's latest failure", stale.Batch.TileIDs)
	}
	// A fresh lookup lets it go.
	_, asOfB2, err := b.AmbiguousPending(ctx, "FR")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := b.ClaimBatch(ctx, tilestore.Claim{FlightID: "FR", Limit: 10, LookedUp: []string{tile}, LookedUpAt: asOfB2, OpID: "op-4", Pick: pickAll("op-4")})
	if err != nil || !slices.Contains(fresh.Batch.TileIDs, tile) {
		t.Fatalf("run B's claim after a fresh lookup = %v, %v; want it to hold %s", fresh.Batch.TileIDs, err, tile)
	}
}

// A claim marks every candidate it locks with its batch's key; the
// candidates Pick leaves out (too large for the provider, or over the
// batch's byte limit) are unmarked in the same transaction, so the next
// claim offers them again.
func TestTheCandidatesPickLeavesOutAreFreeForTheNextClaim(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FP", 5)
	first := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FP", Limit: 5, OpID: "op-1",
		Pick: func(c []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
			b, _ := pickAll("op-1")(c[:2])
			return b, []tilestore.Rejection{{OpID: "op-too-large", TileID: c[2].ID, Reason: tilestore.ReasonTooLarge}}
		}})
	if !slices.Equal(first.Batch.TileIDs, ids[:2]) || first.Candidates != 5 {
		t.Fatalf("first claim: batch %v of %d candidates, want %v of 5", first.Batch.TileIDs, first.Candidates, ids[:2])
	}
	// Last names the rejected tile, the last one the claim took or
	// rejected; the Left two come right after it. A later claim (here from
	// the first tile) finds those two with the rejected one, which a
	// recorded rejection does not keep from being claimed (no budget here).
	if first.Last.ID != ids[2] || first.Left != 2 {
		t.Fatalf("first claim: Last %q, Left %d; want %s (the last tile taken or rejected) and 2", first.Last.ID, first.Left, ids[2])
	}
	next := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FP", Limit: 5, OpID: "op-2", Pick: pickAll("op-2")})
	if !slices.Equal(next.Batch.TileIDs, ids[2:]) {
		t.Fatalf("the next claim took %v, want the three the first left out %v", next.Batch.TileIDs, ids[2:])
	}
	open, err := s.OpenBatches(ctx, "FP")
	if err != nil || len(open) != 2 {
		t.Fatalf("open batches: %v, %v; want op-1 and op-2", open, err)
	}
}

// A Pick that forms its batch under another key than the claim's marked
// nothing: the claim fails whole, journals nothing, and the tiles stay free.
func TestAClaimWhosePickUsesAnotherKeyJournalsNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FK", 3)
	if _, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FK", Limit: 3, OpID: "op-claim", Pick: pickAll("op-other")}); err == nil ||
		!strings.Contains(err.Error(), "the claim marked its tiles for op-claim") {
		t.Fatalf("claim whose Pick formed op-other under the key op-claim: %v; want the mismatch refused", err)
	}
	again := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FK", Limit: 3, OpID: "op-1", Pick: pickAll("op-1")})
	if !slices.Equal(again.Batch.TileIDs, ids) {
		t.Fatalf("after the failed claim, a claim took %v, want every tile %v", again.Batch.TileIDs, ids)
	}
}

// TestClaimsTakeTilesInGoByteOrderWhateverTheDatabaseCollation: a run's
// workers share one claim cursor, moved with Go's string comparison, and
// each claim reads from it with tile_id > cursor in the database's order.
// On a database whose default collation sorts "a1" before "A1" (ICU "en")
// the two orders disagree; tile IDs are compared byte by byte (migration
// 0013), so a claim after a tile takes exactly the tiles Go puts after it,
// and tiles import writes the rows in that order.
func TestClaimsTakeTilesInGoByteOrderWhateverTheDatabaseCollation(t *testing.T) {
	ctx := testCtx(t)
	dbURL := pgtest.NewEmptyDatabaseCollatedBy(t, "en")
	m, err := migrations.New(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := tilestore.NewStore(pool)
	if _, err := s.UpsertFlight(ctx, "IC", tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	ids := []string{"b1", "A1", "a1", "B1", "a-1", "a_1", "a.1", "Z9", "z0", "0a"}
	var tiles []tilestore.Tile
	for i, id := range ids {
		tl := tile("IC", i)
		tl.ID, tl.SHA256 = id, sum(id)
		tiles = append(tiles, tl)
	}
	if _, err := s.InsertTiles(ctx, tiles); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	// The import writes the rows in that order too: the order claims
	// take them, page after page.
	rows, err := pool.Query(ctx, `SELECT tile_id FROM tiles ORDER BY ctid`)
	if err != nil {
		t.Fatal(err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(written, want) {
		t.Errorf("tiles import wrote the rows in the order\n %q\nwant Go's\n %q", written, want)
	}

	var got []string
	var after tilestore.Cursor
	for k := 0; k < len(ids)+1; k++ {
		op := fmt.Sprintf("op-ic-%d", k)
		c := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "IC", Limit: 3, OpID: op, Pick: pickAll(op), After: after})
		if c.Candidates == 0 {
			break
		}
		for _, tl := range c.Tiles {
			if tl.ID <= after.ID {
				t.Errorf("claim after %q took %q, which Go sorts before it", after.ID, tl.ID)
			}
			got = append(got, tl.ID)
		}
		after = c.Last
	}
	if !slices.Equal(got, want) {
		t.Fatalf("claims after each other's Last took\n %q\nwant every tile once, in Go's order\n %q", got, want)
	}
}

// A claim whose journal write fails (here its key is already journaled)
// commits nothing of what it did before in the same transaction: its
// tiles are not left marked, nothing it rejected is recorded, and its
// connection goes back to the pool out of the failed transaction, to be
// used again (one connection: the next statement runs on the same
// server process).
func TestAClaimWhoseJournalWriteFailsCommitsNothingAndLeavesItsConnectionClean(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	url := pgtest.NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := tilestore.NewStore(pool)
	ids := seedFlight(t, s, "FJ", 4)
	mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FJ", Limit: 1, OpID: "op-1", Pick: pickAll("op-1")})
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// Its second candidate is rejected and the others form op-1 again,
	// which the journal already holds.
	_, err = s.ClaimBatch(ctx, tilestore.Claim{FlightID: "FJ", Limit: 3, OpID: "op-1",
		Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
			b, _ := pickAll("op-1")([]tilestore.Tile{cands[0], cands[2]})
			return b, []tilestore.Rejection{{OpID: "op-r", TileID: cands[1].ID, Reason: "too_large"}}
		}})
	if err == nil {
		t.Fatal("a claim journaling a key the journal holds succeeded")
	}
	var after int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&after); err != nil {
		t.Fatalf("the pool's connection after the failed claim: %v", err)
	}
	if after != pid {
		t.Errorf("the failed claim's connection was closed (server process %d, then %d): it should have been rolled back and kept", pid, after)
	}
	var marked, rejections int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tiles WHERE open_op_id IS NOT NULL AND tile_id <> $1),
		(SELECT count(*) FROM upload_rejections)`, ids[0]).Scan(&marked, &rejections); err != nil {
		t.Fatal(err)
	}
	if marked != 0 || rejections != 0 {
		t.Fatalf("after the failed claim: %d tile(s) left marked, %d rejection(s) recorded; want none", marked, rejections)
	}
	again := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FJ", Limit: 3, OpID: "op-2", Pick: pickAll("op-2")})
	if !slices.Equal(again.Batch.TileIDs, ids[1:]) {
		t.Fatalf("after the failed claim, a claim took %v, want %v", again.Batch.TileIDs, ids[1:])
	}
}
