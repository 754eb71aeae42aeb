package tilestore_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/tilestore"
)

// A claim's commit waits for the disk (its batch is sent only once the
// journal holds its key); a settlement's waits exactly when it records
// rejections (a count may write a durable give-up from them), and one
// that only marks tiles uploaded does not (a lost one is settled again
// from the provider's replay). Whatever the server's default: each
// transaction's BEGIN says its mode. Deferred triggers read the setting
// each commit runs with, through ClaimBatch and SettleBatch themselves.
func TestClaimsAndSettlementsCommitWithTheDurabilityTheirSafetyNeeds(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)
	pool := s.Pool()
	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE journal_commits (what text NOT NULL, mode text NOT NULL)`,
		`CREATE FUNCTION note_journal_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO journal_commits VALUES (TG_ARGV[0], current_setting('synchronous_commit'));
			RETURN NULL;
		END $$`,
		`CREATE CONSTRAINT TRIGGER note_claim AFTER INSERT ON upload_batches DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION note_journal_commit('claim')`,
		`CREATE CONSTRAINT TRIGGER note_settle AFTER UPDATE ON upload_batches DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION note_journal_commit('settle')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// modeOf runs step and returns the one mode the commits it noted ran
	// with.
	modeOf := func(what string, step func()) string {
		t.Helper()
		if _, err := pool.Exec(ctx, `TRUNCATE journal_commits`); err != nil {
			t.Fatal(err)
		}
		step()
		var modes []string
		if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT mode), '{}') FROM journal_commits WHERE what = $1`, what).Scan(&modes); err != nil {
			t.Fatal(err)
		}
		if len(modes) != 1 {
			t.Fatalf("%s: commits ran with synchronous_commit %v, want one setting", what, modes)
		}
		return modes[0]
	}
	claim := func(op, id string) {
		t.Helper()
		c, err := s.ClaimBatch(ctx, tilestore.Claim{FlightID: "F1", Limit: 4, OpID: op,
			Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
				for _, c := range cands {
					if c.ID == id {
						return tilestore.Batch{OpID: op, TileIDs: []string{c.ID}, SHA256s: []string{c.SHA256}, Fingerprint: "fp-" + op}, nil
					}
				}
				return tilestore.Batch{}, nil
			}})
		if err != nil || len(c.Batch.TileIDs) != 1 {
			t.Fatalf("claim %s of %s = %+v, %v", op, id, c.Batch, err)
		}
	}
	settle := func(st tilestore.Settlement) func() {
		return func() {
			t.Helper()
			if err := s.SettleBatch(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, def := range []string{"on", "off"} {
		if _, err := pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET synchronous_commit = `+def); err != nil {
			t.Fatal(err)
		}
		pool.Reset() // new sessions pick up the database default
		accepted, rejected := "ok-"+def, "rej-"+def
		if mode := modeOf("claim", func() { claim(accepted, ids[2*i]) }); mode != "on" {
			t.Errorf("server default %s: a claim committed with synchronous_commit=%s, want on", def, mode)
		}
		if mode := modeOf("settle", settle(tilestore.Settlement{OpID: accepted, Uploaded: []string{ids[2*i]}, HTTPStatus: 200})); mode != "off" {
			t.Errorf("server default %s: a settlement without rejections committed with synchronous_commit=%s, want off", def, mode)
		}
		claim(rejected, ids[2*i+1])
		st := tilestore.Settlement{OpID: rejected, HTTPStatus: 200,
			Rejections: []tilestore.Rejection{{OpID: rejected, TileID: ids[2*i+1], Reason: "bad_tile", Message: "bad"}}}
		if mode := modeOf("settle", settle(st)); mode != "on" {
			t.Errorf("server default %s: a settlement with rejections committed with synchronous_commit=%s, want on", def, mode)
		}
	}
}
