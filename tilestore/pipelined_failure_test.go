package tilestore_test

import (
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

// A claim without a stream, a settlement and a send's count each end in
// a pipelined COMMIT, queued after their writes. When one of those writes
// fails, the call fails and none of its writes is committed, in every exec
// mode a database URL may choose: the server skips what follows a failed
// statement up to the batch's one Sync, the COMMIT included.
func TestAFailedPipelinedWriteFailsTheCallAndCommitsNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cache_statement", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			u, err := url.Parse(pgtest.NewURL(t))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("default_query_exec_mode", mode)
			u.RawQuery = q.Encode()
			pool, err := pgxpool.New(ctx, u.String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s := tilestore.NewStore(pool)
			ids := seedFlight(t, s, "FP", 2)
			boom := func(on string) {
				t.Helper()
				if _, err := pool.Exec(ctx, `DROP TRIGGER IF EXISTS boom ON upload_batches;
CREATE OR REPLACE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
CREATE TRIGGER boom BEFORE `+on+` ON upload_batches FOR EACH ROW EXECUTE FUNCTION boom()`); err != nil {
					t.Fatal(err)
				}
			}

			boom("INSERT")
			if err := journal(ctx, s, batchOf("op-1", "FP", ids), tilestore.Claim{}); err == nil {
				t.Fatal("a claim whose batch could not be journaled succeeded")
			}
			if n := countRows(t, s, `SELECT count(*) FROM tiles WHERE open_op_id IS NOT NULL`) +
				countRows(t, s, `SELECT count(*) FROM upload_batches`); n != 0 {
				t.Fatalf("the failed claim left %d marked tiles or batches", n)
			}

			boom("UPDATE OF sends")
			if err := journal(ctx, s, batchOf("op-1", "FP", ids), tilestore.Claim{}); err != nil {
				t.Fatal(err)
			}
			if err := s.NoteSend(ctx, "op-1"); err == nil {
				t.Fatal("a send's count that failed succeeded")
			}
			if n := countRows(t, s, `SELECT sends FROM upload_batches WHERE op_id = 'op-1'`); n != 0 {
				t.Fatalf("the failed count of a send left sends = %d", n)
			}

			boom("UPDATE OF state")
			err = s.SettleBatch(ctx, tilestore.Settlement{OpID: "op-1", Uploaded: ids[:1], HTTPStatus: 200,
				Rejections: []tilestore.Rejection{{TileID: ids[1], Reason: "bad_tile"}}})
			if err == nil {
				t.Fatal("a settlement whose batch could not be marked settled succeeded")
			}
			if state, _ := batchState(t, s, "op-1"); state != "open" {
				t.Fatalf("the failed settlement left the batch %s", state)
			}
			if st := readTile(t, s, ids[0]).Status; st != "pending" {
				t.Fatalf("the failed settlement left tile 0 %s", st)
			}
			if n := countRows(t, s, `SELECT count(*) FROM upload_rejections`); n != 0 {
				t.Fatalf("the failed settlement recorded %d rejections", n)
			}
		})
	}
}
