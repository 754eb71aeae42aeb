package retrydecorator

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// massRejected is a real store with n pending tiles of flight fl, each
// with one uncounted rejection: a budget of 1 gives them all up in the
// next count.
func massRejected(t *testing.T, fl string, n int) *tilestore.Store {
	t.Helper()
	pool, _ := pgtest.New(t)
	st := tilestore.NewStore(pool)
	ctx := context.Background()
	if _, err := st.UpsertFlight(ctx, fl, tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at)
SELECT $1 || '-t' || lpad(i::text, 6, '0'), $1, 18, i, 7, 'image/png', 100, md5(i::text) || md5(i::text),
       $1 || '/18/' || i || '/7.png', now()
  FROM generate_series(0, $2 - 1) i`, fl, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
INSERT INTO upload_rejections (op_id, tile_id, reason, message)
SELECT 'op-mass', tile_id, 'invalid_tile', 'the provider rejected this tile' FROM tiles WHERE flight_id = $1`, fl); err != nil {
		t.Fatal(err)
	}
	return st
}

// idleInner has nothing left to send: the decorator's counts do the work.
func idleInner(fl string) *fakeInner {
	return &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		return uploader.Report{FlightID: fl, Outcome: uploader.OutcomeSuccess}, nil
	}}
}

func openRing(t *testing.T, capacity int64) (RingRecorder, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fdr.ring")
	rec, err := fdr.Open(context.Background(), path, fdr.Options{Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	return RingRecorder{rec}, path
}

// massFull says the mass give-up tests run at full size: 150,000 give-ups
// into the default 4 MiB ring, 40,000 into a 256 KiB one (make stress sets
// TILECTL_MASS_FULL=1; about a minute each without -race on 2 cores, most
// of it Postgres writing the rows). make test runs them at a tenth of that
// size, against rings scaled down with them, so every chunking and
// ring-overwrite path is the same: several chunks, more records than the
// ring holds.
var massFull = os.Getenv("TILECTL_MASS_FULL") == "1"

// massSize is small under make test and full under make stress.
func massSize(small, full int) int {
	if massFull {
		return full
	}
	return small
}

func givenUpCount(t *testing.T, st *tilestore.Store, fl string) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM tiles WHERE flight_id = $1 AND voting_status = 'upload_giveup'`, fl).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAMassGiveUpInOneCountCommitsInChunksWithOneSyncEach(t *testing.T) {
	t.Parallel() // with the other mass test: each is mostly Postgres work
	const fl = "FM"
	n := massSize(15_000, 150_000)
	capacity := int64(massSize(1<<20, fdr.DefaultCapacity))
	st := massRejected(t, fl, n)
	ring, _ := openRing(t, capacity)
	rec := &syncCount{GiveUpRecorder: ring}
	var committed []tilestore.GiveUp
	store := &commitLog{Store: st, committed: &committed}
	cfg := defaultConfig()
	cfg.MaxPerTileAttempts, cfg.MaxInCallRetries = 1, 0
	u := New(idleInner(fl), store, rec, zerolog.Nop(), &fakeClock{now: t0}, cfg, Hooks{})

	start := time.Now()
	rep, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: fl})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("after %s: %v", took, err)
	}
	t.Logf("%d give-ups counted and recorded in %s: %d commits, %d syncs", n, took, store.commits, rec.syncs)
	if got := givenUpCount(t, st, fl); got != n || rep.GivenUp != n || len(committed) != n {
		t.Fatalf("%d tiles upload_giveup, report given_up %d, %d committed; want %d", got, rep.GivenUp, len(committed), n)
	}
	// One fdatasync per chunk, not per record, and chunks of thousands.
	if rec.syncs != store.commits || store.commits > n/1000 {
		t.Errorf("%d syncs for %d commits of %d give-ups; want one sync per commit, at least 1000 give-ups each", rec.syncs, store.commits, n)
	}
	// The run wrote one record per give-up, far more than the ring holds,
	// and its report says so.
	if rep.FDRRecords != n || rep.FDRBytes <= capacity {
		t.Errorf("report fdr_records %d fdr_bytes %d; want %d records, more bytes than the %d-byte ring",
			rep.FDRRecords, rep.FDRBytes, n, capacity)
	}
	if store.commits < 3 {
		t.Errorf("%d commits of %d give-ups into a %d-byte ring; want several chunks", store.commits, n, capacity)
	}
}

// syncCount counts the syncs of the recorder under test.
type syncCount struct {
	GiveUpRecorder
	syncs int
}

func (r *syncCount) Begin(ctx context.Context) (GiveUpBatch, error) {
	b, err := r.GiveUpRecorder.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countedBatch{GiveUpBatch: b, syncs: &r.syncs}, nil
}

type countedBatch struct {
	GiveUpBatch
	syncs *int
}

func (b *countedBatch) Sync() error { *b.syncs++; return b.GiveUpBatch.Sync() }

// ringCheck is the recorder under test with a check before each batch:
// every give-up the store committed since the last batch has its record in
// the ring. Nothing writes between a commit and the next Begin (one
// process, one flight), so this is the ring as it was at that commit.
type ringCheck struct {
	GiveUpRecorder
	t         *testing.T
	path      string
	committed *[]tilestore.GiveUp
	checked   int
}

func (r *ringCheck) Begin(ctx context.Context) (GiveUpBatch, error) {
	r.check()
	return r.GiveUpRecorder.Begin(ctx)
}

func (r *ringCheck) check() {
	r.t.Helper()
	if len(*r.committed) == 0 {
		return
	}
	recs, _, err := fdr.ReadFile(context.Background(), r.path)
	if err != nil {
		r.t.Fatal(err)
	}
	in := map[string]bool{}
	for _, rec := range recs {
		var p GiveUpPayload
		if err := json.Unmarshal(rec.Payload, &p); err != nil {
			r.t.Fatal(err)
		}
		in[p.TileID] = true
	}
	missing := 0
	for _, g := range *r.committed {
		if !in[g.TileID] {
			missing++
		}
	}
	if missing > 0 {
		r.t.Fatalf("%d of %d give-ups committed with their record already overwritten in the ring", missing, len(*r.committed))
	}
	r.checked += len(*r.committed)
	*r.committed = (*r.committed)[:0]
}

// commitLog is the real store, noting every give-up it committed.
type commitLog struct {
	*tilestore.Store
	committed *[]tilestore.GiveUp
	commits   int
}

func (s *commitLog) CountRejectionsUpTo(ctx context.Context, flightID string, maxAttempts, maxTiles int, after string,
	beforeCommit func(ctx context.Context, gaveUp []tilestore.GiveUp) error) (tilestore.CountResult, error) {
	res, err := s.Store.CountRejectionsUpTo(ctx, flightID, maxAttempts, maxTiles, after, beforeCommit)
	if err == nil && len(res.GaveUp) > 0 {
		s.commits++
		*s.committed = append(*s.committed, res.GaveUp...)
	}
	return res, err
}

func TestNoGiveUpCommitsAfterItsRecordWasOverwrittenInASmallRing(t *testing.T) {
	t.Parallel()
	const fl = "FS"
	n := massSize(4_000, 40_000)
	capacity := int64(massSize(fdr.MinCapacity, 256<<10))
	st := massRejected(t, fl, n)
	ring, path := openRing(t, capacity)
	var committed []tilestore.GiveUp
	store := &commitLog{Store: st, committed: &committed}
	rec := &ringCheck{GiveUpRecorder: ring, t: t, path: path, committed: &committed}
	cfg := defaultConfig()
	cfg.MaxPerTileAttempts, cfg.MaxInCallRetries = 1, 0
	u := New(idleInner(fl), store, rec, zerolog.Nop(), &fakeClock{now: t0}, cfg, Hooks{})

	rep, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: fl})
	if err != nil {
		t.Fatal(err)
	}
	rec.check() // the last chunk
	if rec.checked != n || rep.GivenUp != n {
		t.Fatalf("%d give-ups checked, report given_up %d; want %d", rec.checked, rep.GivenUp, n)
	}
	if store.commits < 2 {
		t.Errorf("%d commits for %d records of a %d-byte ring, want several chunks", store.commits, n, capacity)
	}
	t.Logf("%d give-ups in %d commits", n, store.commits)
}
