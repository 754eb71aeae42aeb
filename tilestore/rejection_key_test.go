package tilestore_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// Deleting a tile (a flight's deletion, a requeue's cleanup) has Postgres
// check that no rejection still names it: a lookup of upload_rejections
// by tile_id alone, once per deleted tile. It must read the few pages
// that hold the tile's rejections, not the whole table or a whole index:
// else deleting a flight's tiles costs their number times the journal's
// size. The statement below is the one the foreign key's check runs.
func TestATilesRejectionsAreFoundByItsKeyWhateverTheJournalsSize(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FK", 3000)
	reject(t, s, "op-k1", "bad_tile", ids...)
	reject(t, s, "op-k2", "bad_tile", ids[:1500]...)
	if _, err := s.Pool().Exec(ctx, `ANALYZE upload_rejections`); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var plan []map[string]any
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		SELECT 1 FROM ONLY upload_rejections x WHERE tile_id = $1 FOR KEY SHARE OF x`,
		pgx.QueryExecModeSimpleProtocol, ids[700]).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	top, _ := plan[0]["Plan"].(map[string]any)
	hit, _ := top["Shared Hit Blocks"].(float64)
	read, _ := top["Shared Read Blocks"].(float64)
	rows, _ := top["Actual Rows"].(float64)
	if rows != 2 {
		t.Fatalf("the lookup found %v rejections of %s, want 2", rows, ids[700])
	}
	if pages := hit + read; pages > 8 {
		t.Errorf("finding one tile's 2 rejections among 4,500 read %v pages, want a few (an index by tile_id):\n%v", pages, plan)
	}
}
