package tilestore_test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/tilestore"
)

// CountRejectionsUpTo first looks for an uncounted rejection of the flight
// after the cursor, on the plan the pool's cached statement gets after a
// few counts: a generic one, made without the flight or the cursor. That
// plan reads the uncounted rejections, not the flight's tiles up to the
// first of them: here the first is on the 4,001st of 5,000 tiles.
func TestTheLookForUncountedRejectionsReadsOnlyThem(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FE", 5000)
	// Every tile has a counted rejection; the last 1,000 an uncounted one.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO upload_rejections (op_id, tile_id, reason, message, counted_at)
		SELECT 'op-0', tile_id, 'invalid_tile', 'bad', now() FROM unnest($1::text[]) AS u(tile_id)`, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO upload_rejections (op_id, tile_id, reason, message)
		SELECT 'op-1', tile_id, 'invalid_tile', 'bad' FROM unnest($1::text[]) AS u(tile_id)`, ids[4000:]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, "ANALYZE tiles, upload_rejections"); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "PREPARE look AS "+tilestore.UncountedExistSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	plan, err := explain(ctx, tx, "(ANALYZE, BUFFERS) EXECUTE look('FE', '')", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Buffers: shared hit=(\d+)`).FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("no buffer count in the plan:\n%s", plan)
	}
	// The first uncounted rejection: a few pages of its index, its tile's
	// key.
	if hit, _ := strconv.Atoi(m[1]); hit > 30 {
		t.Errorf("the generic plan of the look for uncounted rejections read %d buffers to find one:\n%s", hit, plan)
	}
}

// The look for uncounted rejections finds the flight's after the cursor
// however many of other flights come before them in tile_id order, and
// none of another flight's or before the cursor.
func TestCountRejectionsUpToFindsTheFlightsBehindOtherFlights(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	early := seedFlight(t, s, "FA", 40) // FA-t... sort before FB-t...
	late := seedFlight(t, s, "FB", 3)
	reject(t, s, "op-a", "bad_tile", early...)
	reject(t, s, "op-b", "bad_tile", late[1])
	for _, after := range []string{late[1], late[2]} {
		res, err := s.CountRejectionsUpTo(ctx, "FB", 10, 0, after, nil)
		if err != nil || res.Counted != 0 {
			t.Fatalf("count of FB after %s = %+v, %v; want nothing (its rejection is not after the cursor)", after, res, err)
		}
	}
	res, err := s.CountRejectionsUpTo(ctx, "FB", 10, 0, late[0], nil)
	if err != nil || res.Counted != 1 || res.Attempts[late[1]] != 1 {
		t.Fatalf("count of FB after %s = %+v, %v; want its one rejection, of %s", late[0], res, err, late[1])
	}
	res, err = s.CountRejectionsUpTo(ctx, "FB", 10, 0, "", nil)
	if err != nil || res.Counted != 0 {
		t.Fatalf("second count of FB = %+v, %v; want nothing left (FA's are another flight's)", res, err)
	}
	res, err = s.CountRejectionsUpTo(ctx, "FA", 10, 0, "", nil)
	if err != nil || res.Counted != len(early) {
		t.Fatalf("count of FA = %+v, %v; want its %d rejections, still uncounted", res, err, len(early))
	}
}
