package tilestore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

// TestAClaimMarksEveryCandidateItLockedThatChangedMeanwhile: another
// transaction writes a free tile (a count adding a rejection to it, a
// claim that locked it and left it) and commits after a claim's statement
// took its snapshot but before the claim reached the tile. The claim locks
// the tile's newest version, which its snapshot does not see; it must
// still mark it and return it with the others, since it counted toward
// the claim's limit.
//
// SKIP LOCKED means a claim waits for no row, so the test widens that
// window itself, through ClaimBatch and its real statement: the claim runs
// as a role subject to a row security policy on upload_rejections whose
// check waits for an advisory lock the writer holds until it commits. The
// claim meets that check in its first candidate's budget (the tile has an
// uncounted rejection), after its snapshot and before it locks any tile.
func TestAClaimMarksEveryCandidateItLockedThatChangedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const gateKey = 73017
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := "tilectl_gated_claim_" + strings.ToLower(rand.Text()[:12])
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role); err != nil {
		t.Fatal(err)
	}
	// Registered before the database: cleanups run last first, so the role
	// is dropped once the database holding its grants is.
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.AdminURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	pool, url := pgtest.New(t)
	s := tilestore.NewStore(pool)
	ids := seedFlight(t, s, "F1", 3)
	reject(t, s, "op-0", "bad_tile", ids[0])
	for _, q := range []string{
		`CREATE FUNCTION test_claim_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
		 BEGIN PERFORM pg_advisory_xact_lock_shared(` + strconv.Itoa(gateKey) + `); RETURN true; END $$`,
		`ALTER TABLE upload_rejections ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY test_claim_gate ON upload_rejections FOR SELECT USING (test_claim_gate())`,
		`GRANT USAGE ON SCHEMA public TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ` + role,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO ` + role,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+role)
		return err
	}
	gated, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gated.Close)
	claimer := tilestore.NewStore(gated)

	writer, writerPID := openWriter(t, ctx, pool)
	if _, err := writer.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, gateKey); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec(ctx, `UPDATE tiles SET upload_attempts = upload_attempts WHERE tile_id = $1`, ids[2]); err != nil {
		t.Fatal(err)
	}

	type result struct {
		c      tilestore.Claimed
		locked int // the flight's tiles locked while Pick ran
		err    error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		pick := pickAll("op-1")
		r.c, r.err = claimer.ClaimBatch(ctx, tilestore.Claim{FlightID: "F1", Limit: len(ids), MaxAttempts: 10, OpID: "op-1",
			Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
				var free int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM tiles WHERE flight_id = 'F1'
					FOR UPDATE SKIP LOCKED) f`).Scan(&free); err != nil {
					r.err = err
				}
				r.locked = len(ids) - free
				return pick(cands)
			}})
		done <- r
	}()
	// Commit only once the claim waits at the gate, inside its statement.
	awaitBlockedBy(t, ctx, pool, writerPID, func() error {
		select {
		case r := <-done:
			return fmt.Errorf("the claim ended (%d candidates, %v) without waiting at the gate: the test no longer opens the window it is about",
				r.c.Candidates, r.err)
		default:
			return nil
		}
	})
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.c.Candidates != r.locked || r.locked != len(ids) {
		t.Fatalf("claim marked %d of %d locked candidates (%d tiles free): a candidate locked in a version its snapshot does not see was not marked",
			r.c.Candidates, r.locked, len(ids))
	}
	var got []string
	for _, tl := range r.c.Tiles {
		got = append(got, tl.ID)
	}
	if !slices.Equal(got, ids) {
		t.Errorf("claim took %v, want %v in order", got, ids)
	}
	var marked []string
	rows, err := pool.Query(ctx, `SELECT tile_id FROM tiles WHERE open_op_id = 'op-1' ORDER BY tile_id`)
	if err != nil {
		t.Fatal(err)
	}
	if marked, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(marked, ids) {
		t.Errorf("tiles marked as op-1's: %v, want %v", marked, ids)
	}
}
