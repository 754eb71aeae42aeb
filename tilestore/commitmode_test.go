package tilestore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// commitTrigger names a commit to watch (what) by the write it makes:
// event is a row trigger's "AFTER ... ON table", when its optional WHEN
// clause.
type commitTrigger struct{ what, event, when string }

// commitModes reads the synchronous_commit each watched commit runs with:
// deferred constraint triggers fire at the commit and note the setting
// then.
type commitModes struct {
	t    testing.TB
	ctx  context.Context
	pool *pgxpool.Pool
	db   string
}

// watchCommits installs the triggers of watch in pool's database.
func watchCommits(t testing.TB, ctx context.Context, pool *pgxpool.Pool, watch ...commitTrigger) *commitModes {
	t.Helper()
	c := &commitModes{t: t, ctx: ctx, pool: pool}
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&c.db); err != nil {
		t.Fatal(err)
	}
	qs := []string{
		`CREATE TABLE commit_modes (what text NOT NULL, mode text NOT NULL)`,
		`CREATE FUNCTION note_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO commit_modes VALUES (TG_ARGV[0], current_setting('synchronous_commit'));
			RETURN NULL;
		END $$`,
	}
	for _, w := range watch {
		qs = append(qs, `CREATE CONSTRAINT TRIGGER note_`+w.what+` `+w.event+` DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW `+w.when+` EXECUTE FUNCTION note_commit_mode('`+w.what+`')`)
	}
	for _, q := range qs {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return c
}

// serverDefault makes def the database's synchronous_commit for the
// pool's new sessions, and has the pool open new ones.
func (c *commitModes) serverDefault(def string) {
	c.t.Helper()
	if _, err := c.pool.Exec(c.ctx, `ALTER DATABASE `+pgx.Identifier{c.db}.Sanitize()+` SET synchronous_commit = `+def); err != nil {
		c.t.Fatal(err)
	}
	c.pool.Reset()
}

// of runs step and returns the one mode the commits of what it made ran
// with.
func (c *commitModes) of(what string, step func()) string {
	c.t.Helper()
	if _, err := c.pool.Exec(c.ctx, `TRUNCATE commit_modes`); err != nil {
		c.t.Fatal(err)
	}
	step()
	var modes []string
	if err := c.pool.QueryRow(c.ctx, `SELECT coalesce(array_agg(DISTINCT mode), '{}') FROM commit_modes WHERE what = $1`, what).Scan(&modes); err != nil {
		c.t.Fatal(err)
	}
	if len(modes) != 1 {
		c.t.Fatalf("%s: commits ran with synchronous_commit %v, want one setting", what, modes)
	}
	return modes[0]
}
