package tilestore_test

import (
	"errors"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func TestSettleBatchAppliesTheAnswerOnceAndResettlingIsANoOp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)
	if err := journal(ctx, s, batchOf("op-1", "F1", ids[:3]), tilestore.Claim{}); err != nil {
		t.Fatal(err)
	}
	st := tilestore.Settlement{
		OpID: "op-1", Uploaded: ids[:2], HTTPStatus: 200,
		Rejections: []tilestore.Rejection{{TileID: ids[2], Reason: "bad_tile", Message: "too blurry"}},
	}
	if err := s.SettleBatch(ctx, st); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		for i, want := range []string{"uploaded", "uploaded", "pending", "pending"} {
			if got := readTile(t, s, ids[i]).Status; got != want {
				t.Errorf("tile %d is %s, want %s", i, got, want)
			}
		}
		if n := countRows(t, s, `SELECT count(*) FROM upload_rejections WHERE op_id = 'op-1' AND tile_id = $1
			AND reason = 'bad_tile' AND message = 'too blurry' AND counted_at IS NULL`, ids[2]); n != 1 {
			t.Errorf("%d matching rejection rows, want 1", n)
		}
		if state, code := batchState(t, s, "op-1"); state != "settled" || code == nil || *code != 200 {
			t.Errorf("batch = %s/%v, want settled/200", state, code)
		}
	}
	check()
	// The same answer again, and even a different one, change nothing.
	if err := s.SettleBatch(ctx, st); err != nil {
		t.Fatalf("re-settle: %v", err)
	}
	if err := s.SettleBatch(ctx, tilestore.Settlement{OpID: "op-1", Uploaded: ids[2:3], HTTPStatus: 207}); err != nil {
		t.Fatalf("re-settle with another answer: %v", err)
	}
	check()
	if open, _ := s.OpenBatches(ctx, "F1"); len(open) != 0 {
		t.Errorf("settled batch still open: %+v", open)
	}
	if err := s.FailBatch(ctx, "op-1", 500, ""); !errors.Is(err, tilestore.ErrBatchNotOpen) {
		t.Errorf("failing a settled batch: err = %v, want ErrBatchNotOpen", err)
	}
}

func TestSettleBatchNamingNonMembersChangesNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)
	if err := journal(ctx, s, batchOf("op-1", "F1", ids[:2]), tilestore.Claim{}); err != nil {
		t.Fatal(err)
	}
	err := s.SettleBatch(ctx, tilestore.Settlement{
		OpID: "op-1", Uploaded: []string{ids[0], ids[3]}, HTTPStatus: 200,
		Rejections: []tilestore.Rejection{{TileID: ids[1], Reason: "bad_tile"}},
	})
	var nm *tilestore.NonMemberError
	if !errors.As(err, &nm) || len(nm.IDs) != 1 || nm.IDs[0] != ids[3] {
		t.Fatalf("err = %v, want *NonMemberError naming %s", err, ids[3])
	}
	for _, id := range ids {
		if st := readTile(t, s, id).Status; st != "pending" {
			t.Errorf("tile %s is %s after a refused settlement", id, st)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM upload_rejections`); n != 0 {
		t.Errorf("%d rejections recorded by a refused settlement", n)
	}
	if state, _ := batchState(t, s, "op-1"); state != "open" {
		t.Errorf("batch is %s, want still open", state)
	}

	cases := []tilestore.Settlement{
		{OpID: "op-nope", Uploaded: ids[:1]},
		{OpID: "op-1", Uploaded: ids[:1], Rejections: []tilestore.Rejection{{TileID: ids[0], Reason: "x"}}},
		{OpID: "op-1", Rejections: []tilestore.Rejection{{OpID: "op-other", TileID: ids[0], Reason: "x"}}},
		{OpID: "op-1", Rejections: []tilestore.Rejection{{TileID: ids[0]}}},
	}
	for i, c := range cases {
		if err := s.SettleBatch(ctx, c); err == nil {
			t.Errorf("case %d: settlement %+v accepted", i, c)
		}
	}
	if err := s.SettleBatch(ctx, cases[0]); !errors.Is(err, tilestore.ErrBatchNotFound) {
		t.Errorf("unknown batch: err = %v, want ErrBatchNotFound", err)
	}
	if state, _ := batchState(t, s, "op-1"); state != "open" {
		t.Errorf("batch is %s after refused settlements, want open", state)
	}
}

func TestRecordRejectionsIgnoresDuplicatesAndRefusesUnknownTiles(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 2)
	rs := []tilestore.Rejection{
		{OpID: "local-1", TileID: ids[0], Reason: "blob_missing"},
		{OpID: "local-1", TileID: ids[0], Reason: "blob_missing"},
		{OpID: "local-1", TileID: ids[1], Reason: "blob_corrupt", Message: "sha256 differs"},
	}
	if err := s.RecordRejections(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordRejections(ctx, rs[:1]); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM upload_rejections`); n != 2 {
		t.Errorf("%d rejection rows, want 2", n)
	}
	err := s.RecordRejections(ctx, []tilestore.Rejection{
		{OpID: "local-2", TileID: ids[1], Reason: "blob_missing"},
		{OpID: "local-2", TileID: "ghost", Reason: "blob_missing"},
	})
	if !errors.Is(err, tilestore.ErrTileNotFound) {
		t.Fatalf("err = %v, want ErrTileNotFound", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM upload_rejections WHERE op_id = 'local-2'`); n != 0 {
		t.Errorf("a refused call recorded %d rows", n)
	}
}

// A failure at the last step (marking the batch settled) must undo the
// earlier ones: no tile uploaded, no rejection recorded.
func TestSettleBatchIsAtomicWhenALaterStatementFails(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 2)
	if err := journal(ctx, s, batchOf("op-1", "F1", ids), tilestore.Claim{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `
CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
CREATE TRIGGER boom BEFORE UPDATE OF state ON upload_batches FOR EACH ROW EXECUTE FUNCTION boom();`); err != nil {
		t.Fatal(err)
	}
	err := s.SettleBatch(ctx, tilestore.Settlement{
		OpID: "op-1", Uploaded: ids[:1], HTTPStatus: 200,
		Rejections: []tilestore.Rejection{{TileID: ids[1], Reason: "bad_tile"}},
	})
	if err == nil {
		t.Fatal("settle succeeded despite the injected failure")
	}
	if st := readTile(t, s, ids[0]).Status; st != "pending" {
		t.Errorf("tile 0 is %s, want pending (rolled back)", st)
	}
	if n := countRows(t, s, `SELECT count(*) FROM upload_rejections`); n != 0 {
		t.Errorf("%d rejections survived the rollback", n)
	}
}
