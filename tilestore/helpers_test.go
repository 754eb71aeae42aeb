package tilestore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

// newStore gives a test its own migrated database.
func newStore(t testing.TB) *tilestore.Store {
	t.Helper()
	pool, _ := pgtest.New(t)
	return tilestore.NewStore(pool)
}

// openWriter begins a transaction on pool that another statement is to
// wait for, and returns it with its backend's PID; the test's end rolls
// it back unless it was committed.
func openWriter(t testing.TB, ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, int) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// awaitBlockedBy returns once a session of the server waits for a lock
// the backend pid holds. ended, when not nil, is asked between looks: an
// error from it (the statement meant to wait finished first) fails the
// test.
func awaitBlockedBy(t testing.TB, ctx context.Context, pool *pgxpool.Pool, pid int, ended func() error) {
	t.Helper()
	for {
		if ended != nil {
			if err := ended(); err != nil {
				t.Fatal(err)
			}
		}
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)))`, pid).Scan(&waiting); err != nil {
			t.Fatalf("wait for a session to wait for backend %d: %v", pid, err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// explain returns the plan of q (what follows EXPLAIN: a statement, or
// options and a statement) with args on tx, one line per row.
func explain(ctx context.Context, tx pgx.Tx, q string, args ...any) (string, error) {
	rows, err := tx.Query(ctx, "EXPLAIN "+q, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// tile builds a valid tile of the flight; tile IDs sort in i order.
func tile(flight string, i int) tilestore.Tile {
	id := fmt.Sprintf("%s-t%06d", flight, i)
	return tilestore.Tile{
		ID: id, FlightID: flight, Z: 18, X: int64(i), Y: 7,
		ContentType: "image/png", SizeBytes: int64(100 + i), SHA256: sum(id),
		BlobPath:   fmt.Sprintf("%s/18/%d/7.png", flight, i),
		CapturedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
	}
}

// seedFlight creates a flight (on ground) with n pending tiles and returns
// their IDs in order.
func seedFlight(t testing.TB, s *tilestore.Store, flight string, n int) []string {
	t.Helper()
	ctx := testCtx(t)
	if _, err := s.UpsertFlight(ctx, flight, tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	tiles := make([]tilestore.Tile, n)
	ids := make([]string, n)
	for i := range tiles {
		tiles[i] = tile(flight, i)
		ids[i] = tiles[i].ID
	}
	if n > 0 {
		got, err := s.InsertTiles(ctx, tiles)
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Fatalf("seed: inserted %d tiles, want %d", got, n)
		}
	}
	return ids
}

// tileRow reads a tile's mutable columns straight from the table.
type tileRow struct {
	Status      string
	Attempts    int
	Reason      *string
	UploadedAt  *time.Time
	GaveUpAt    *time.Time
	LastRejAt   *time.Time
	LastMessage *string
}

func readTile(t testing.TB, s *tilestore.Store, id string) tileRow {
	t.Helper()
	var r tileRow
	err := s.Pool().QueryRow(context.Background(), `SELECT voting_status, upload_attempts, last_rejection_reason,
		uploaded_at, gave_up_at, last_rejected_at, last_rejection_message FROM tiles WHERE tile_id = $1`, id).
		Scan(&r.Status, &r.Attempts, &r.Reason, &r.UploadedAt, &r.GaveUpAt, &r.LastRejAt, &r.LastMessage)
	if err != nil {
		t.Fatalf("read tile %s: %v", id, err)
	}
	return r
}

func setStatusSQL(t testing.TB, s *tilestore.Store, status string, ids ...string) {
	t.Helper()
	if _, err := s.Pool().Exec(context.Background(),
		`UPDATE tiles SET voting_status = $1 WHERE tile_id = ANY($2)`, status, ids); err != nil {
		t.Fatal(err)
	}
}
