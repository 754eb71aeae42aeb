package tilestore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// reject records rejections of ids under op as a run records the tiles it
// turns away before sending: a claim whose Pick rejects them. It fails the
// test unless every ID was a candidate and so was rejected.
func reject(t testing.TB, s *tilestore.Store, op string, reason string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var flight string
	var tiles int
	if err := s.Pool().QueryRow(ctx, `SELECT min(f.flight_id), count(*) FROM tiles f
		WHERE f.flight_id = (SELECT min(flight_id) FROM tiles WHERE tile_id = ANY($1))`, ids).Scan(&flight, &tiles); err != nil {
		t.Fatal(err)
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	c, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: flight, Limit: max(tiles, 1), OpID: op,
		Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
			var rs []tilestore.Rejection
			for _, c := range cands {
				if want[c.ID] {
					rs = append(rs, tilestore.Rejection{OpID: op, TileID: c.ID, Reason: reason, Message: reason + " in " + op})
				}
			}
			return tilestore.Batch{}, rs
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rejections) != len(want) {
		t.Fatalf("claim %s rejected %d of %d tiles %v: the others were no candidates", op, len(c.Rejections), len(want), ids)
	}
}

func TestCountRejectionsCountsEachRejectionExactlyOnce(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 3)
	other := seedFlight(t, s, "F2", 1)
	reject(t, s, "op-1", "bad_tile", ids[0], ids[1])
	reject(t, s, "op-2", "too_dark", ids[0])
	reject(t, s, "op-9", "bad_tile", other[0]) // another flight: not counted here

	res, err := s.CountRejectionsUpTo(ctx, "F1", 10, 0, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Counted != 3 || res.Attempts[ids[0]] != 2 || res.Attempts[ids[1]] != 1 || len(res.Attempts) != 2 || len(res.GaveUp) != 0 {
		t.Fatalf("result = %+v, want 3 counted, attempts {t0:2 t1:1}, no give-ups", res)
	}
	again, err := s.CountRejectionsUpTo(ctx, "F1", 10, 0, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Counted != 0 || len(again.Attempts) != 0 {
		t.Errorf("second count = %+v, want nothing counted", again)
	}
	t0 := readTile(t, s, ids[0])
	if t0.Attempts != 2 || t0.Status != "pending" || t0.LastRejAt == nil {
		t.Errorf("tile 0 = %+v, want 2 attempts, pending, last_rejected_at set", t0)
	}
	if a := readTile(t, s, other[0]).Attempts; a != 0 {
		t.Errorf("F2's tile was counted: %d attempts", a)
	}
	if n := countRows(t, s, `SELECT count(*) FROM upload_rejections WHERE counted_at IS NULL`); n != 1 {
		t.Errorf("%d uncounted rejections left, want 1 (F2's)", n)
	}
}

func TestCountRejectionsKeepsTheNewestRejectionsReason(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 1)
	reject(t, s, "op-1", "older_reason", ids[0])
	reject(t, s, "op-2", "newer_reason", ids[0])
	if _, err := s.Pool().Exec(ctx, `UPDATE upload_rejections SET rejected_at = now() - interval '1 minute' WHERE op_id = 'op-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CountRejectionsUpTo(ctx, "F1", 10, 0, "", nil); err != nil {
		t.Fatal(err)
	}
	got := readTile(t, s, ids[0])
	if got.Reason == nil || *got.Reason != "newer_reason" || got.LastMessage == nil || *got.LastMessage != "newer_reason in op-2" {
		t.Errorf("last rejection = %v / %v, want newer_reason", got.Reason, got.LastMessage)
	}
}

func TestCountRejectionsGivesUpAtTheBudgetInTheSameTransaction(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)
	reject(t, s, "op-1", "bad_tile", ids[0], ids[1], ids[3])
	reject(t, s, "op-2", "bad_tile", ids[0], ids[3])
	reject(t, s, "op-3", "bad_tile", ids[0], ids[3])
	setStatusSQL(t, s, "rejected", ids[3]) // not uploadable: never "gives up"
	// A batch claimed before the count gives tile 0 up, answered after.
	if err := journal(ctx, s, batchOf("op-4", "F1", ids[:1]), tilestore.Claim{}); err != nil {
		t.Fatal(err)
	}

	var seen []tilestore.GiveUp
	res, err := s.CountRejectionsUpTo(ctx, "F1", 3, 0, "", func(ctx context.Context, gaveUp []tilestore.GiveUp) error {
		seen = gaveUp
		// Another connection must not see the increment or the give-up yet:
		// both commit together, after this hook.
		if row := readTile(t, s, ids[0]); row.Attempts != 0 || row.Status != "pending" {
			t.Errorf("inside the hook another session sees %+v, want the old row", row)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].TileID != ids[0] || seen[0].Attempts != 3 || seen[0].LastReason != "bad_tile" ||
		seen[0].FlightID != "F1" || seen[0].GaveUpAt.IsZero() {
		t.Fatalf("hook got %+v, want one give-up of %s at 3 attempts", seen, ids[0])
	}
	if len(res.GaveUp) != 1 || res.Counted != 7 {
		t.Errorf("result = %+v, want 7 counted and 1 give-up", res)
	}
	want := map[string]struct {
		status   string
		attempts int
	}{
		ids[0]: {"upload_giveup", 3}, ids[1]: {"pending", 1}, ids[2]: {"pending", 0}, ids[3]: {"rejected", 3},
	}
	for id, w := range want {
		row := readTile(t, s, id)
		if row.Status != w.status || row.Attempts != w.attempts {
			t.Errorf("tile %s = %s/%d, want %s/%d", id, row.Status, row.Attempts, w.status, w.attempts)
		}
		if (row.GaveUpAt != nil) != (w.status == "upload_giveup") {
			t.Errorf("tile %s gave_up_at = %v", id, row.GaveUpAt)
		}
	}

	// A later rejection of a tile that already gave up is counted, but it
	// does not give up again.
	if err := s.SettleBatch(ctx, tilestore.Settlement{OpID: "op-4", HTTPStatus: 200,
		Rejections: []tilestore.Rejection{{OpID: "op-4", TileID: ids[0], Reason: "bad_tile"}}}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	res, err = s.CountRejectionsUpTo(ctx, "F1", 3, 0, "", func(context.Context, []tilestore.GiveUp) error { calls++; return nil })
	if err != nil || res.Counted != 1 || len(res.GaveUp) != 0 || calls != 0 {
		t.Errorf("recount = %+v, %v, hook calls %d; want 1 counted, no give-up, no hook", res, err, calls)
	}
}

func TestCountRejectionsRollsBackEverythingWhenTheHookFails(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 2)
	reject(t, s, "op-1", "bad_tile", ids...)
	hookErr := errors.New("fdr disk full")
	_, err := s.CountRejectionsUpTo(ctx, "F1", 1, 0, "", func(context.Context, []tilestore.GiveUp) error { return hookErr })
	if !errors.Is(err, hookErr) {
		t.Fatalf("err = %v, want the hook's error", err)
	}
	for _, id := range ids {
		if row := readTile(t, s, id); row.Attempts != 0 || row.Status != "pending" || row.GaveUpAt != nil {
			t.Errorf("tile %s = %+v after rollback, want untouched", id, row)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM upload_rejections WHERE counted_at IS NULL`); n != 2 {
		t.Errorf("%d uncounted rejections, want 2 (still uncounted)", n)
	}
	// The next run reaches the same give-ups.
	var seen []tilestore.GiveUp
	res, err := s.CountRejectionsUpTo(ctx, "F1", 1, 0, "", func(_ context.Context, g []tilestore.GiveUp) error { seen = g; return nil })
	if err != nil || res.Counted != 2 || len(seen) != 2 || seen[0].TileID != ids[0] || seen[1].TileID != ids[1] {
		t.Errorf("retry = %+v, %v, hook saw %+v; want both tiles given up", res, err, seen)
	}
}

func TestCountRejectionsRefusesAZeroBudget(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	if _, err := s.CountRejectionsUpTo(testCtx(t), "F1", 0, 0, "", nil); err == nil {
		t.Error("maxAttempts 0 accepted")
	}
}

func TestConcurrentCountRejectionsCountEachRejectionOnce(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 20)
	for op := range 3 {
		reject(t, s, fmt.Sprintf("op-%d", op), "bad_tile", ids...)
	}
	const callers = 4
	var wg sync.WaitGroup
	counted := make(chan int, callers)
	for range callers {
		wg.Go(func() {
			res, err := s.CountRejectionsUpTo(ctx, "F1", 100, 0, "", nil)
			if err != nil {
				t.Error(err)
			}
			counted <- res.Counted
		})
	}
	wg.Wait()
	close(counted)
	total := 0
	for n := range counted {
		total += n
	}
	if total != 3*len(ids) {
		t.Errorf("callers counted %d rejections in all, want %d", total, 3*len(ids))
	}
	for _, id := range ids {
		if a := readTile(t, s, id).Attempts; a != 3 {
			t.Errorf("tile %s attempts = %d, want 3", id, a)
		}
	}
}

// TestCountRejectionsNumbersEachGiveUpAfterARequeue gives a tile up three
// times with a requeue between each: every give-up has the next
// generation, so the record that names it (giveup/<tile>/<generation>) is
// a new one each time.
func TestCountRejectionsNumbersEachGiveUpAfterARequeue(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 2)
	for gen := 1; gen <= 3; gen++ {
		reject(t, s, fmt.Sprintf("op-%d", gen), "bad_tile", ids[0])
		var hooked []tilestore.GiveUp
		res, err := s.CountRejectionsUpTo(ctx, "F1", 1, 0, "", func(_ context.Context, g []tilestore.GiveUp) error { hooked = g; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GaveUp) != 1 || res.GaveUp[0].TileID != ids[0] || res.GaveUp[0].Generation != gen ||
			len(hooked) != 1 || hooked[0].Generation != gen {
			t.Fatalf("give-up %d: result %+v, hook saw %+v; want tile 0 at generation %d", gen, res.GaveUp, hooked, gen)
		}
		if _, err := s.Requeue(ctx, "F1", []string{ids[0]}, false, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCountRejectionsCountsRowsChangedWhileItWaited: another transaction
// writes a tile and a rejection the count is about to lock (a claim
// marking the tile, a settlement), and commits while the count waits for
// them. The count locks their newest versions, which its snapshot does
// not see, and must still add each rejection to its tile and mark it, both
// or neither.
func TestCountRejectionsCountsRowsChangedWhileItWaited(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 3)
	reject(t, s, "op-1", "bad_tile", ids...)

	writer, writerPID := openWriter(t, ctx, s.Pool())
	if _, err := writer.Exec(ctx, `UPDATE tiles SET open_op_id = open_op_id WHERE tile_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec(ctx, `UPDATE upload_rejections SET message = message WHERE tile_id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}

	type result struct {
		res tilestore.CountResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.CountRejectionsUpTo(ctx, "F1", 100, 0, "", nil)
		done <- result{res, err}
	}()
	// Commit only once the count waits for the writer's rows.
	awaitBlockedBy(t, ctx, s.Pool(), writerPID, nil)
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.res.Counted != len(ids) {
		t.Fatalf("count counted %d rejections, want %d: %v", r.res.Counted, len(ids), r.err)
	}
	for _, id := range ids {
		if a := readTile(t, s, id).Attempts; a != 1 {
			t.Errorf("tile %s attempts = %d, want 1", id, a)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM upload_rejections WHERE counted_at IS NULL`); n != 0 {
		t.Errorf("%d rejections left uncounted, want 0", n)
	}
}
