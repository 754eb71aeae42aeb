package tilestore_test

import (
	"errors"
	"slices"
	"testing"
	"time"

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

// Whether a batch's answer uploaded all its members (one statement) or
// some (another), a settlement marks each uploaded member uploaded once:
// one that already was keeps its first upload time, the others get the
// settlement's; members not uploaded stay pending; every member is freed.
func TestSettlingAllOrSomeMembersKeepsAnUploadedTilesFirstUploadTime(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FU", 6)
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name     string
		op       string
		members  []string
		uploaded []string
		pending  []string
	}{
		{"all uploaded", "op-all", ids[0:3], ids[0:3], nil},
		{"some uploaded", "op-some", ids[3:6], ids[3:5], ids[5:6]},
	} {
		if err := journal(ctx, s, batchOf(c.op, "FU", c.members), tilestore.Claim{}); err != nil {
			t.Fatal(err)
		}
		// The first member was uploaded meanwhile, by another way.
		if _, err := s.Pool().Exec(ctx, `UPDATE tiles SET voting_status = 'uploaded', uploaded_at = $2, open_op_id = $3
			WHERE tile_id = $1`, c.members[0], first, c.op); err != nil {
			t.Fatal(err)
		}
		before := time.Now().Add(-time.Minute)
		if err := s.SettleBatch(ctx, tilestore.Settlement{OpID: c.op, Uploaded: c.uploaded, HTTPStatus: 200}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for i, id := range c.members {
			r := readTile(t, s, id)
			want := "uploaded"
			if slices.Contains(c.pending, id) {
				want = "pending"
			}
			switch {
			case r.Status != want:
				t.Errorf("%s: member %d is %s, want %s", c.name, i, r.Status, want)
			case i == 0 && (r.UploadedAt == nil || !r.UploadedAt.Equal(first)):
				t.Errorf("%s: the member uploaded before has uploaded_at %v, want its first %v", c.name, r.UploadedAt, first)
			case i > 0 && want == "uploaded" && (r.UploadedAt == nil || r.UploadedAt.Before(before)):
				t.Errorf("%s: member %d has uploaded_at %v, want the settlement's", c.name, i, r.UploadedAt)
			case want == "pending" && r.UploadedAt != nil:
				t.Errorf("%s: pending member %d has uploaded_at %v", c.name, i, r.UploadedAt)
			}
			if n := countRows(t, s, `SELECT count(*) FROM tiles WHERE tile_id = $1 AND open_op_id IS NOT NULL`, id); n != 0 {
				t.Errorf("%s: member %d is still marked as in an open batch", c.name, i)
			}
		}
	}
}
