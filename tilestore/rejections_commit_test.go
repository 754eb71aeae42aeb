package tilestore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/tilestore"
)

// A count's commit waits for the disk exactly when it gives a tile up:
// the caller reports a give-up once CountRejectionsUpTo returns, so it
// must be durable by then, whatever the server's default. A count
// without give-ups is re-derived from rejections that were committed
// durably (a crash that loses it leaves them uncounted, attempts
// unchanged), so its commit need not wait. A deferred trigger reads the
// setting the commit runs with.
func TestCountRejectionsCommitWaitsForTheDiskOnlyWhenATileGivesUp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 2)
	pool := s.Pool()
	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE count_commits (mode text NOT NULL)`,
		`CREATE FUNCTION note_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO count_commits VALUES (current_setting('synchronous_commit'));
			RETURN NULL;
		END $$`,
		`CREATE CONSTRAINT TRIGGER note_commit_mode AFTER UPDATE ON tiles DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (OLD.upload_attempts IS DISTINCT FROM NEW.upload_attempts) EXECUTE FUNCTION note_commit_mode()`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// commitMode counts with a budget of 2 and returns the mode its commit
	// ran with.
	commitMode := func(wantGiveUps int) string {
		t.Helper()
		if _, err := pool.Exec(ctx, `TRUNCATE count_commits`); err != nil {
			t.Fatal(err)
		}
		res, err := s.CountRejectionsUpTo(ctx, "F1", 2, 0, "", func(context.Context, []tilestore.GiveUp) error { return nil })
		if err != nil || res.Counted != 1 || len(res.GaveUp) != wantGiveUps {
			t.Fatalf("count = %+v, %v; want 1 counted, %d give-ups", res, err, wantGiveUps)
		}
		var modes []string
		if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT mode), '{}') FROM count_commits`).Scan(&modes); err != nil {
			t.Fatal(err)
		}
		if len(modes) != 1 {
			t.Fatalf("the count's commit ran with synchronous_commit %v, want one setting", modes)
		}
		return modes[0]
	}
	for i, def := range []string{"on", "off"} {
		if _, err := pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET synchronous_commit = `+def); err != nil {
			t.Fatal(err)
		}
		pool.Reset() // new sessions pick up the database default
		reject(t, s, "first-"+def, "bad_tile", ids[i])
		if mode := commitMode(0); mode != "off" {
			t.Errorf("server default %s: a count without give-ups committed with synchronous_commit=%s, want off", def, mode)
		}
		reject(t, s, "second-"+def, "bad_tile", ids[i])
		if mode := commitMode(1); mode != "on" {
			t.Errorf("server default %s: a count that gave a tile up committed with synchronous_commit=%s, want on", def, mode)
		}
	}
}
