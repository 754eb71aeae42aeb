package tilestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func batchOf(op, flight string, ids []string) tilestore.Batch {
	sums := make([]string, len(ids))
	for i, id := range ids {
		sums[i] = sum(id)
	}
	return tilestore.Batch{OpID: op, FlightID: flight, Fingerprint: "fp-" + op, TileIDs: ids, SHA256s: sums}
}

func batchState(t testing.TB, s *tilestore.Store, op string) (state string, status *int) {
	t.Helper()
	if err := s.Pool().QueryRow(context.Background(),
		`SELECT state, http_status FROM upload_batches WHERE op_id = $1`, op).Scan(&state, &status); err != nil {
		t.Fatal(err)
	}
	return state, status
}

func countRows(t testing.TB, s *tilestore.Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// journal journals b, a batch of the tiles the test chose, the way upload
// runs do: through ClaimBatch, whose Pick returns b. c says what else the
// claim asks (LookedUp, say); its FlightID, Limit and Pick are set here.
func journal(ctx context.Context, s *tilestore.Store, b tilestore.Batch, c tilestore.Claim) error {
	c.FlightID, c.Limit, c.OpID = b.FlightID, 1000, b.OpID
	c.Pick = func([]tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) { return b, nil }
	got, err := s.ClaimBatch(ctx, c)
	if err == nil && got.Batch.OpID != b.OpID {
		err = fmt.Errorf("claim journaled %q, want batch %s (no candidates: %d)", got.Batch.OpID, b.OpID, got.Candidates)
	}
	return err
}

func TestClaimBatchNeverJournalsAKeyTwice(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)
	b := batchOf("op-1", "F1", ids[:2])
	if err := journal(ctx, s, b, tilestore.Claim{}); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteSend(ctx, "op-1"); err != nil {
		t.Fatal(err)
	}
	// Its members are in an open batch now: no claim offers them again,
	// under the same key or any other.
	if err := journal(ctx, s, b, tilestore.Claim{}); err == nil {
		t.Fatalf("claiming the same members again under the same key succeeded")
	}
	changed := []tilestore.Batch{
		batchOf("op-1", "F1", ids[:3]),
		batchOf("op-1", "F1", []string{ids[1], ids[0]}),
		batchOf("op-1", "F1", ids[2:4]), // free tiles, but the key is taken
	}
	otherSum := batchOf("op-1", "F1", ids[:2])
	otherSum.SHA256s[1] = sum("something else")
	changed = append(changed, otherSum)
	for i, c := range changed {
		if err := journal(ctx, s, c, tilestore.Claim{}); err == nil {
			t.Errorf("variant %d: journaled key op-1 again with other members", i)
		}
	}
	open, err := s.OpenBatches(ctx, "F1")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].Sends != 1 || open[0].Fingerprint != "fp-op-1" || len(open[0].TileIDs) != 2 {
		t.Fatalf("open batches = %+v, want op-1 once, with 1 send (a refused claim must not touch it)", open)
	}
	if n := countRows(t, s, `SELECT count(*) FROM tiles WHERE open_op_id IS NOT NULL`); n != 2 {
		t.Errorf("%d tiles are in a batch, want op-1's 2 (a refused claim marks none)", n)
	}
	if err := s.NoteSend(ctx, "op-missing"); !errors.Is(err, tilestore.ErrBatchNotFound) {
		t.Errorf("NoteSend(unknown) = %v", err)
	}
}

func TestClaimBatchRefusesTilesOfAnotherOpenBatchUntilItFails(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)
	seedFlight(t, s, "F2", 1)
	if err := journal(ctx, s, batchOf("op-1", "F1", ids[:2]), tilestore.Claim{}); err != nil {
		t.Fatal(err)
	}
	if err := journal(ctx, s, batchOf("op-2", "F1", ids[1:3]), tilestore.Claim{}); err == nil {
		t.Fatalf("overlapping batch journaled")
	}
	if err := journal(ctx, s, batchOf("op-x", "F2", ids[:1]), tilestore.Claim{}); err == nil {
		t.Errorf("batch of another flight's tile journaled")
	}
	for _, fl := range []string{"F1", "F2"} {
		if open, err := s.OpenBatches(ctx, fl); err != nil || len(open) != map[string]int{"F1": 1, "F2": 0}[fl] ||
			(fl == "F1" && open[0].OpID != "op-1") {
			t.Fatalf("after the refused claims, open batches of %s = %+v, %v; want only op-1", fl, open, err)
		}
	}

	if err := s.FailBatch(ctx, "op-1", 422, "IDEMPOTENCY_EXPIRED"); err != nil {
		t.Fatal(err)
	}
	if err := s.FailBatch(ctx, "op-1", 422, "again"); err != nil {
		t.Errorf("failing a failed batch: %v", err)
	}
	if st, code := batchState(t, s, "op-1"); st != "failed" || code == nil || *code != 422 {
		t.Errorf("op-1 = %s/%v, want failed/422", st, code)
	}
	// A failed batch's tiles are free, once looked up (the provider may
	// have stored them under op-1).
	_, asOf, err := s.AmbiguousPending(ctx, "F1")
	if err != nil {
		t.Fatal(err)
	}
	if err := journal(ctx, s, batchOf("op-2", "F1", ids[1:3]), tilestore.Claim{LookedUp: ids[1:2], LookedUpAt: asOf}); err != nil {
		t.Fatalf("after FailBatch the tiles are free, but: %v", err)
	}
	if st := readTile(t, s, ids[0]).Status; st != "pending" {
		t.Errorf("a failed batch's tile is %s, want pending", st)
	}
	open, err := s.OpenBatches(ctx, "F1")
	if err != nil || len(open) != 1 || open[0].OpID != "op-2" {
		t.Errorf("open batches = %+v, %v; want only op-2", open, err)
	}
	if err := s.FailBatch(ctx, "op-missing", 0, ""); !errors.Is(err, tilestore.ErrBatchNotFound) {
		t.Errorf("FailBatch(unknown) = %v", err)
	}
}

func TestOpenBatchesListsOldestFirst(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 3)
	for i, op := range []string{"op-c", "op-a", "op-b"} {
		if err := journal(ctx, s, batchOf(op, "F1", ids[i:i+1]), tilestore.Claim{}); err != nil {
			t.Fatal(err)
		}
	}
	// Same-transaction timestamps could tie; make the ages explicit.
	if _, err := s.Pool().Exec(ctx, `UPDATE upload_batches SET created_at = now() - interval '1 hour' * ascii(right(op_id, 1))`); err != nil {
		t.Fatal(err)
	}
	open, err := s.OpenBatches(ctx, "F1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range open {
		got = append(got, b.OpID)
	}
	if len(got) != 3 || got[0] != "op-c" || got[1] != "op-b" || got[2] != "op-a" {
		t.Errorf("order = %v, want oldest first [op-c op-b op-a]", got)
	}
}

func TestNoteSendRefusesABatchThatIsNoLongerOpen(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 2)
	if err := journal(ctx, s, batchOf("op-1", "F1", ids), tilestore.Claim{}); err != nil {
		t.Fatal(err)
	}
	if err := s.FailBatch(ctx, "op-1", 422, "failed elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteSend(ctx, "op-1"); !errors.Is(err, tilestore.ErrBatchNotOpen) {
		t.Fatalf("NoteSend of a failed batch = %v, want ErrBatchNotOpen: it must not go on the wire again", err)
	}
	if n := countRows(t, s, `SELECT sends FROM upload_batches WHERE op_id = 'op-1'`); n != 0 {
		t.Errorf("sends = %d, want 0: a refused send counts nothing", n)
	}
}

// A claim made for a send counts that send with the batch, so the sender
// does not note it again; a trim, which says nothing was sent, clears the
// count; a claim that does not say it sends counts nothing.
func TestAClaimForASendCountsItsFirstSend(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FS", 9)
	sends := func(op string) int {
		return countRows(t, s, `SELECT sends FROM upload_batches WHERE op_id = $1`, op)
	}
	if err := journal(ctx, s, batchOf("op-send", "FS", ids[:3]), tilestore.Claim{Sending: true}); err != nil {
		t.Fatal(err)
	}
	if n := sends("op-send"); n != 1 {
		t.Errorf("a claim made for a send journaled %d sends, want 1", n)
	}
	if err := s.NoteSend(ctx, "op-send"); err != nil {
		t.Fatal(err)
	}
	if n := sends("op-send"); n != 2 {
		t.Errorf("after a resend noted: %d sends, want 2", n)
	}
	if err := journal(ctx, s, batchOf("op-quiet", "FS", ids[3:6]), tilestore.Claim{}); err != nil {
		t.Fatal(err)
	}
	if n := sends("op-quiet"); n != 0 {
		t.Errorf("a claim not made for a send journaled %d sends, want 0", n)
	}
	if err := journal(ctx, s, batchOf("op-trim", "FS", ids[6:]), tilestore.Claim{Sending: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.TrimUnsentBatch(ctx, batchOf("op-trim", "FS", ids[6:8]), nil); err != nil {
		t.Fatal(err)
	}
	if n := sends("op-trim"); n != 0 {
		t.Errorf("a trimmed batch, of which nothing was sent, counts %d sends, want 0", n)
	}
}
