package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/migrations"
)

// schemaSQL describes the public schema as sorted lines: every column with
// its type, collation, storage, nullability and default (position counted among live columns,
// so a dropped and re-added column compares equal), every constraint and
// every index with its definition, every table's storage options
// (fillfactor, ...) and every trigger with its definition and function
// body. The migrations' own table is left out.
const schemaSQL = `
SELECT line FROM (
    SELECT format('column %s.%s #%s %s collate=%s storage=%s %s default=%s', c.relname, a.attname,
                  row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
                  format_type(a.atttypid, a.atttypmod), coalesce(co.collname, '-'), a.attstorage,
                  CASE WHEN a.attnotnull THEN 'not null' ELSE 'null' END,
                  coalesce(pg_get_expr(d.adbin, d.adrelid), '-')) AS line
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      LEFT JOIN pg_collation co ON co.oid = a.attcollation
     WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
       AND c.relname <> $1
    UNION ALL
    SELECT format('constraint %s.%s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
      FROM pg_constraint k
      JOIN pg_class c ON c.oid = k.conrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relname <> $1
    UNION ALL
    SELECT format('index %s.%s %s', tablename, indexname, indexdef)
      FROM pg_indexes WHERE schemaname = 'public' AND tablename <> $1
    UNION ALL
    SELECT format('options %s %s', c.relname, array_to_string(c.reloptions, ','))
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.reloptions IS NOT NULL AND c.relname <> $1
    UNION ALL
    SELECT format('trigger %s %s', tg.tgname, pg_get_triggerdef(tg.oid))
      FROM pg_trigger tg WHERE NOT tg.tgisinternal
    UNION ALL
    SELECT format('function %s %s', p.proname, md5(p.prosrc))
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
) s ORDER BY line`

// connect opens a connection to dbURL for the rest of the test, with a
// context that bounds everything the test does on it.
func connect(t *testing.T, dbURL string) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return ctx, conn
}

func dumpSchema(t *testing.T, dbURL string) []string {
	t.Helper()
	ctx, conn := connect(t, dbURL)
	defer conn.Close(ctx) // called many times per test: do not hold it
	rows, err := conn.Query(ctx, schemaSQL, migrations.Table)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func exec(t *testing.T, dbURL, sql string, args ...any) {
	t.Helper()
	ctx, conn := connect(t, dbURL)
	defer conn.Close(ctx) // called many times per test: do not hold it
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func newMigrator(t *testing.T, dbURL string) *migrations.Migrator {
	t.Helper()
	m, err := migrations.New(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// migrateTo moves the database to exactly version v with golang-migrate
// itself: Migrator has no "up to N", and the test needs every step.
func migrateTo(t *testing.T, dbURL string, v uint) {
	t.Helper()
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", migrations.Table)
	u.RawQuery = q.Encode()
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Migrate(v); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		t.Fatalf("migrate to %d: %v", v, err)
	}
}

func diff(a, b []string) string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

func TestUpDownUpLeavesAnIdenticalSchema(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDatabase(t)
	m := newMigrator(t, dbURL)
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	first := dumpSchema(t, dbURL)
	for _, want := range []string{"index tiles.tiles_pending_idx", "constraint upload_rejections.upload_rejections_pkey",
		"column tiles.upload_attempts"} {
		if !slices.ContainsFunc(first, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Fatalf("schema after up has no %q; the dump is broken:\n%s", want, strings.Join(first, "\n"))
		}
	}
	if err := m.Down(0); err != nil {
		t.Fatal(err)
	}
	if empty := dumpSchema(t, dbURL); len(empty) != 0 {
		t.Fatalf("down all the way left:\n%s", strings.Join(empty, "\n"))
	}
	if v, dirty, err := m.Version(); err != nil || v != 0 || dirty {
		t.Errorf("version after down = %d dirty=%v %v; want 0", v, dirty, err)
	}
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	if again := dumpSchema(t, dbURL); !slices.Equal(first, again) {
		t.Errorf("schema differs after up, down, up:\n%s", diff(first, again))
	}
	if err := m.Up(); err != nil {
		t.Errorf("Up on a current schema = %v, want nil", err)
	}
}

func TestEachDownUndoesExactlyItsUp(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDatabase(t)
	latest := uint(migrations.Latest())
	if latest < 1 {
		t.Fatal("no migrations embedded")
	}
	at := make([][]string, latest+1)
	at[0] = dumpSchema(t, dbURL)
	for v := uint(1); v <= latest; v++ {
		migrateTo(t, dbURL, v)
		at[v] = dumpSchema(t, dbURL)
		if slices.Equal(at[v], at[v-1]) {
			t.Errorf("migration %04d changed nothing in the schema", v)
		}
	}
	m := newMigrator(t, dbURL)
	for v := latest; v >= 1; v-- {
		if err := m.Down(1); err != nil {
			t.Fatalf("down from %d: %v", v, err)
		}
		got := dumpSchema(t, dbURL)
		if !slices.Equal(got, at[v-1]) {
			t.Errorf("down %04d does not restore the schema of %04d:\n%s", v, v-1, diff(at[v-1], got))
		}
	}
}

// 0002's down has to put given-up tiles somewhere the older CHECK allows.
func TestDown0002ReturnsGivenUpTilesToPending(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDatabase(t)
	migrateTo(t, dbURL, 2)
	exec(t, dbURL, `INSERT INTO flights (flight_id, state) VALUES ('F1', 'on_ground');
INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at, voting_status)
VALUES ('t1', 'F1', 1, 0, 0, 'image/png', 1, repeat('a', 64), 'F1/1/0/0.png', now(), 'upload_giveup')`)
	migrateTo(t, dbURL, 1)
	ctx, conn := connect(t, dbURL)
	var st string
	if err := conn.QueryRow(ctx, `SELECT voting_status FROM tiles WHERE tile_id = 't1'`).Scan(&st); err != nil {
		t.Fatal(err)
	}
	if st != "pending" {
		t.Errorf("given-up tile is %q after down 0002, want pending", st)
	}
}

func TestDirtyDatabaseStopsUpUntilForced(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDatabase(t)
	m := newMigrator(t, dbURL)
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	latest := uint(migrations.Latest())
	exec(t, dbURL, `UPDATE `+migrations.Table+` SET dirty = true`)

	v, dirty, err := m.Version()
	if err != nil || v != latest || !dirty {
		t.Fatalf("Version = %d dirty=%v %v; want %d dirty", v, dirty, err, latest)
	}
	for name, op := range map[string]func() error{"up": m.Up, "down": func() error { return m.Down(1) }} {
		err := op()
		var de *migrations.DirtyError
		if !errors.As(err, &de) || de.Version != latest {
			t.Fatalf("%s on a dirty database: err = %v, want *DirtyError at %d", name, err, latest)
		}
		if !strings.Contains(err.Error(), "migrate force") {
			t.Errorf("%s: message %q does not tell the operator to run 'migrate force'", name, err)
		}
	}
	if err := m.Force(int(latest)); err != nil {
		t.Fatal(err)
	}
	if v, dirty, err := m.Version(); err != nil || v != latest || dirty {
		t.Fatalf("after force: Version = %d dirty=%v %v; want %d clean", v, dirty, err, latest)
	}
	if err := m.Up(); err != nil {
		t.Errorf("Up after force = %v, want nil", err)
	}
	if err := m.Force(int(latest) + 1); err == nil {
		t.Error("Force to a version this build does not have was accepted")
	}
}

// TestSHA256IsValidatedWheneverItIsWritten: since 0005 the rule is a
// trigger (so counting attempts does not pay for it), and it must still
// refuse every bad value that is inserted or written, with SQLSTATE 23514.
func TestSHA256IsValidatedWheneverItIsWritten(t *testing.T) {
	dbURL := pgtest.NewURL(t)
	ctx, conn := connect(t, dbURL)
	good := strings.Repeat("ab", 32)
	insert := `INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at)
		VALUES ($1, 'F', 1, 0, 0, 'image/png', 1, $2, 'x', now())`
	if _, err := conn.Exec(ctx, `INSERT INTO flights (flight_id, state) VALUES ('F', 'on_ground')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, insert, "ok", good); err != nil {
		t.Fatalf("valid sha256 refused: %v", err)
	}
	for _, bad := range []string{strings.ToUpper(good), good[:63], good + "0", strings.Repeat("g", 64), ""} {
		_, err := conn.Exec(ctx, insert, "bad", bad)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("insert with sha256 %q: err %v, want check_violation 23514", bad, err)
		}
		_, err = conn.Exec(ctx, `UPDATE tiles SET sha256 = $1 WHERE tile_id = 'ok'`, bad)
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("update to sha256 %q: err %v, want check_violation 23514", bad, err)
		}
	}
	if _, err := conn.Exec(ctx, `UPDATE tiles SET upload_attempts = upload_attempts + 1 WHERE tile_id = 'ok'`); err != nil {
		t.Fatalf("counting an attempt failed: %v", err)
	}
}

// TestNoRowTriggerOnTilesRunsBeforeAnUpdate: Postgres fetches and locks
// each row an UPDATE writes for a BEFORE UPDATE row trigger of the table,
// whatever the trigger's column list, before it even looks at whether
// the trigger fires. Claims and settlements write every tile of a flight
// (the claim's mark, the settlement's status), so such a trigger would
// make each of those writes lock its row first, one more WAL record per
// settled tile. The sha256 rule checks an update after the write instead
// (TestSHA256IsValidatedWheneverItIsWritten).
func TestNoRowTriggerOnTilesRunsBeforeAnUpdate(t *testing.T) {
	dbURL := pgtest.NewURL(t)
	ctx, conn := connect(t, dbURL)
	// tgtype bits (pg_trigger.h): 1 row, 2 before, 16 update.
	rows, err := conn.Query(ctx, `SELECT tgname FROM pg_trigger
		WHERE tgrelid = 'tiles'::regclass AND NOT tgisinternal AND tgtype & (1 | 2 | 16) = (1 | 2 | 16)`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) > 0 {
		t.Errorf("row triggers that run before an UPDATE of tiles: %v; want none", names)
	}
}

func TestCheckSchemaSaysWhatToDoForEveryState(t *testing.T) {
	dbURL := pgtest.NewEmptyDatabase(t)
	ctx, conn := connect(t, dbURL)
	latest := migrations.Latest()
	expect := func(step, want string) {
		t.Helper()
		err := migrations.CheckSchema(ctx, conn)
		switch {
		case want == "" && err != nil:
			t.Fatalf("%s: %v, want nil", step, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("%s: %v, want an error saying %q", step, err, want)
		}
	}
	expect("empty database", "run 'tilectl migrate up'")
	m := newMigrator(t, dbURL)
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	expect("migrated", "")
	if err := m.Down(1); err != nil {
		t.Fatal(err)
	}
	expect("one behind", fmt.Sprintf("at version %d, this tilectl needs %d", latest-1, latest))
	exec(t, dbURL, "UPDATE "+migrations.Table+" SET version = $1", latest+1)
	expect("newer", "use a newer tilectl")
	exec(t, dbURL, "UPDATE "+migrations.Table+" SET version = $1, dirty = true", latest)
	expect("dirty", "migrate force")
}
