package retrydecorator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// These tests run the decorator on the real Postgres store.

func pgStore(t *testing.T, flightID string, n int) (*tilestore.Store, []string) {
	t.Helper()
	pool, _ := pgtest.New(t)
	st := tilestore.NewStore(pool)
	ctx := context.Background()
	if _, err := st.UpsertFlight(ctx, flightID, tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	tiles := make([]tilestore.Tile, n)
	ids := make([]string, n)
	for i := range tiles {
		id := fmt.Sprintf("%s-t%04d", flightID, i)
		h := sha256.Sum256([]byte(id))
		tiles[i] = tilestore.Tile{ID: id, FlightID: flightID, Z: 18, X: int64(i), Y: 7, ContentType: "image/png",
			SizeBytes: 100, SHA256: hex.EncodeToString(h[:]), BlobPath: fmt.Sprintf("%s/18/%d/7.png", flightID, i),
			CapturedAt: t0}
		ids[i] = id
	}
	if _, err := st.InsertTiles(ctx, tiles); err != nil {
		t.Fatal(err)
	}
	return st, ids
}

// pickAll puts every candidate of a claim in one batch under op.
func pickAll(op string) func([]tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
	return func(c []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
		b := tilestore.Batch{OpID: op, Fingerprint: "fp-" + op}
		for _, t := range c {
			b.TileIDs, b.SHA256s = append(b.TileIDs, t.ID), append(b.SHA256s, t.SHA256)
		}
		return b, nil
	}
}

// storeInner is an inner uploader that works like the HTTP one against the
// store: it claims every claimable tile in one batch (ClaimBatch, as upload
// runs do), and settles it with the answer reject gives, recording every
// tile it sent.
func storeInner(st *tilestore.Store, flightID string, reject func(call int, id string) bool) (*fakeInner, *[][]string) {
	f := &fakeInner{}
	sent := &[][]string{}
	f.UploadFunc = func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		call := f.calls - 1
		rep := uploader.Report{FlightID: flightID, Outcome: uploader.OutcomeSuccess}
		claimed, err := st.ClaimBatch(ctx, tilestore.Claim{FlightID: flightID, Limit: 1000,
			OpID: fmt.Sprintf("op-%s-%d", flightID, call), Pick: pickAll(fmt.Sprintf("op-%s-%d", flightID, call))})
		if err != nil {
			return rep, err
		}
		b := claimed.Batch
		*sent = append(*sent, b.TileIDs)
		if len(b.TileIDs) == 0 {
			return rep, nil
		}
		s := tilestore.Settlement{OpID: b.OpID, HTTPStatus: 200}
		for _, id := range b.TileIDs {
			if reject(call, id) {
				s.Rejections = append(s.Rejections, tilestore.Rejection{OpID: b.OpID, TileID: id, Reason: "invalid_tile", Message: "bad " + id})
				rep.Rejections = append(rep.Rejections, uploader.PerTileStatus{TileID: id, Status: uploader.TileRejected, Reason: "invalid_tile", OpID: b.OpID})
			} else {
				s.Uploaded = append(s.Uploaded, id)
			}
		}
		if err := st.SettleBatch(ctx, s); err != nil {
			return rep, err
		}
		rep.Accepted, rep.Rejected, rep.Batches = len(s.Uploaded), len(s.Rejections), 1
		if rep.Rejected > 0 {
			rep.Outcome = uploader.OutcomePartial
		}
		rep.Pending, _, err = st.PendingSummary(ctx, flightID)
		return rep, err
	}
	return f, sent
}

func TestAcrossRunsSecondRunSendsOnlyTheTwentyRejectedTiles(t *testing.T) {
	const fl = "FX"
	st, ids := pgStore(t, fl, 50)
	rejected := map[string]bool{}
	for i := 0; i < 50; i += 5 { // 20 of 50: the tiles with i%5 in {0, 3}
		rejected[ids[i]] = true
	}
	for i := 3; len(rejected) < 20; i += 5 {
		rejected[ids[i]] = true
	}
	inner, sent := storeInner(st, fl, func(call int, id string) bool { return call == 0 && rejected[id] })
	cfg := defaultConfig()
	cfg.MaxInCallRetries = 0 // one inner call per run: the runs are not mixed with in-call retries
	clock := &fakeClock{now: t0}
	u := New(inner, st, &memRecorder{}, zerolog.Nop(), clock, cfg, Hooks{})
	ctx := context.Background()

	first, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl})
	if err != nil {
		t.Fatal(err)
	}
	if first.Accepted != 30 || first.Rejected != 20 || first.Outcome != uploader.OutcomePartial || first.Pending != 20 {
		t.Fatalf("run 1: accepted %d rejected %d outcome %s pending %d; want 30 20 partial 20",
			first.Accepted, first.Rejected, first.Outcome, first.Pending)
	}
	clock.now = clock.now.Add(5 * time.Minute) // the operator comes back later
	second, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl})
	if err != nil {
		t.Fatal(err)
	}
	if len(*sent) != 2 {
		t.Fatalf("inner calls %d, want 2", len(*sent))
	}
	var want []string
	for _, id := range ids {
		if rejected[id] {
			want = append(want, id)
		}
	}
	if got := (*sent)[1]; !slices.Equal(got, want) {
		t.Errorf("run 2 sent %d tiles %v, want only the 20 rejected ones", len(got), got)
	}
	if second.Outcome != uploader.OutcomeSuccess || second.Accepted != 20 || len(clock.sleeps) != 0 {
		t.Errorf("run 2: outcome %s accepted %d sleeps %v; want success 20 none", second.Outcome, second.Accepted, clock.sleeps)
	}
	tiles, err := st.PendingUploads(ctx, fl, "", 100)
	if err != nil || len(tiles) != 0 {
		t.Errorf("still pending after run 2: %d (%v)", len(tiles), err)
	}
	for _, id := range want[:3] {
		if n := attemptsOf(t, st, id); n != 1 {
			t.Errorf("tile %s attempts %d, want 1 (its one rejection counted once across both runs)", id, n)
		}
	}
}

func attemptsOf(t *testing.T, st *tilestore.Store, id string) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(), `SELECT upload_attempts FROM tiles WHERE tile_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func statusOf(t *testing.T, st *tilestore.Store, id string) string {
	t.Helper()
	var s string
	if err := st.Pool().QueryRow(context.Background(), `SELECT voting_status FROM tiles WHERE tile_id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRealStoreGiveUpAfterCrashBeforeCommitIsRecordedOnce(t *testing.T) {
	const fl = "FG"
	st, ids := pgStore(t, fl, 2)
	bad := ids[0]
	inner, sent := storeInner(st, fl, func(_ int, id string) bool { return id == bad })
	cfg := defaultConfig()
	cfg.MaxInCallRetries, cfg.MaxPerTileAttempts = 0, 2
	rec := newTestRecorder(t)
	clock := &fakeClock{now: t0}
	u := New(inner, st, rec, zerolog.Nop(), clock, cfg, Hooks{})

	// Run 1: one rejection, attempts 1 of 2.
	if _, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: fl}); err != nil {
		t.Fatal(err)
	}
	// Run 2: the second rejection reaches the budget; the database side
	// "dies" after the FDR write and before the commit: every connection
	// of this database is terminated inside beforeCommit, so the commit
	// cannot happen.
	rec.afterAppend = func() { terminateBackends(t, st) }
	_, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: fl})
	if err == nil {
		t.Fatal("run 2: want an error from the interrupted commit")
	}
	rec.afterAppend = nil
	if s, n := statusOf(t, st, bad), attemptsOf(t, st, bad); s != "pending" || n != 1 {
		t.Fatalf("after the interrupted commit: %s with %d attempts, want pending with 1 (nothing committed)", s, n)
	}
	if got := rec.count(t, GiveUpKind); got != 1 {
		t.Fatalf("after run 2: %d give-up records, want 1 (written before the failed commit)", got)
	}

	// Run 3: the recount reaches the same give-up; the key dedupes.
	rep, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: fl})
	if err != nil {
		t.Fatal(err)
	}
	if s, n := statusOf(t, st, bad), attemptsOf(t, st, bad); s != "upload_giveup" || n != 2 {
		t.Errorf("after run 3: %s with %d attempts, want upload_giveup with 2", s, n)
	}
	if got := rec.count(t, GiveUpKind); got != 1 {
		t.Errorf("after run 3: %d give-up records, want exactly 1", got)
	}
	if rep.GivenUp != 1 {
		t.Errorf("run 3 given_up %d, want 1", rep.GivenUp)
	}
	if last := (*sent)[len(*sent)-1]; slices.Contains(last, bad) {
		t.Errorf("run 3 sent the given-up tile: %v", last)
	}
}

// testRecorder wraps the recorder under test with a hook after each
// batch of records is on disk (and before the store commits).
type testRecorder struct {
	GiveUpRecorder
	afterAppend func()
	count       func(t *testing.T, kind string) int
}

func (r *testRecorder) Begin(ctx context.Context) (GiveUpBatch, error) {
	b, err := r.GiveUpRecorder.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &testBatch{GiveUpBatch: b, after: r.afterAppend}, nil
}

type testBatch struct {
	GiveUpBatch
	after func()
}

func (b *testBatch) Sync() error {
	err := b.GiveUpBatch.Sync()
	if err == nil && b.after != nil {
		b.after()
	}
	return err
}

// BenchmarkDecoratorSuccessOverheadPostgres is the decorator's overhead on the
// success path against the real store: the count before the call, which
// finds nothing to count (one query, no transaction), plus the loop; a
// call that recorded no rejection is not followed by a count. Its targets
// are in internal/benchreport.
func BenchmarkDecoratorSuccessOverheadPostgres(b *testing.B) {
	pool, _ := pgtest.New(b)
	st := tilestore.NewStore(pool)
	ctx := context.Background()
	if _, err := st.UpsertFlight(ctx, "FB", tilestore.FlightOnGround); err != nil {
		b.Fatal(err)
	}
	rep := uploader.Report{FlightID: "FB", Outcome: uploader.OutcomeSuccess}
	inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		return rep, nil
	}}
	u := New(inner, st, &memRecorder{}, zerolog.Nop(), &fakeClock{now: t0}, defaultConfig(), Hooks{})
	req := uploader.Request{FlightID: "FB"}
	for b.Loop() {
		if _, err := u.UploadPendingTiles(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// terminateBackends ends every session of the store's database, as a
// crash of the database side would.
func terminateBackends(t *testing.T, st *tilestore.Store) {
	t.Helper()
	ctx := context.Background()
	var db string
	if err := st.Pool().QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, db); err != nil {
		t.Fatal(err)
	}
	// Like a restarted process, later calls start from fresh connections.
	st.Pool().Reset()
}
