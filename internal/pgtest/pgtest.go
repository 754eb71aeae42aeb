// Package pgtest gives each test its own real Postgres database, migrated to
// the current schema, and drops it when the test ends.
//
// The server comes from TILECTL_TEST_DATABASE_URL (an admin URL whose user
// may CREATE DATABASE), else postgres://postgres@127.0.0.1:5432/postgres.
// A test that cannot reach it fails; it never skips.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/migrations"
)

// DefaultAdminURL is used when TILECTL_TEST_DATABASE_URL is not set.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the URL of the server's maintenance database.
func AdminURL() string {
	if u := os.Getenv("TILECTL_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// WithDatabase returns adminURL with its database name replaced.
func WithDatabase(adminURL, name string) string {
	u, err := url.Parse(adminURL)
	if err != nil {
		panic(fmt.Sprintf("pgtest: bad admin URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

func connectAdmin(ctx context.Context, t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("pgtest: cannot reach Postgres (%v). Tests need a real server: run 'make test' "+
			"(it starts one), or set TILECTL_TEST_DATABASE_URL to an admin URL", err)
	}
	return conn
}

// NewEmptyDatabase creates a database with no schema and returns its URL.
// It is dropped when the test ends.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "", "")
}

// NewEmptyDatabaseCollatedBy creates a database with no schema whose
// default collation is the ICU locale's (say "en": case and punctuation
// sort as people expect, not byte by byte) and returns its URL. It is
// dropped when the test ends.
func NewEmptyDatabaseCollatedBy(t testing.TB, icuLocale string) string {
	t.Helper()
	return newDatabase(t, "template0", "LOCALE_PROVIDER icu ICU_LOCALE "+quoteLiteral(icuLocale))
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// NewURL creates a database at the current schema and returns its URL.
func NewURL(t testing.TB) string {
	t.Helper()
	// make test drops the templates when it ends (scripts/pg.sh
	// drop-templates): a test running beside it then builds it again.
	for attempt := 1; ; attempt++ {
		url, err := tryNewDatabase(t, ensureTemplate(t), "")
		if err == nil {
			return url
		}
		var pgErr *pgconn.PgError
		// 3D000 invalid_catalog_name: the template is gone.
		if attempt < 3 && errors.As(err, &pgErr) && pgErr.Code == "3D000" {
			continue
		}
		t.Fatalf("pgtest: %v", err)
	}
}

// New creates a database at the current schema and returns a pool on it,
// closed when the test ends, and its URL.
func New(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	dbURL := NewURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, dbURL
}

func newDatabase(t testing.TB, template, options string) string {
	t.Helper()
	url, err := tryNewDatabase(t, template, options)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return url
}

func tryNewDatabase(t testing.TB, template, options string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := connectAdmin(ctx, t)
	defer conn.Close(ctx)

	name := "tilectl_t_" + randomHex(6)
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
		// Copying a template needs it free of other sessions: take turns.
		lock(ctx, t, conn, template)
		defer unlock(ctx, conn, template)
	}
	if options != "" {
		stmt += " " + options
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return "", fmt.Errorf("%s: %w", stmt, err)
	}
	t.Cleanup(func() { dropDatabase(t, name) })
	return WithDatabase(AdminURL(), name), nil
}

func dropDatabase(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Errorf("pgtest: drop %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop %s: %v", name, err)
	}
}

// ensureTemplate builds, once per schema, a migrated database that test
// databases are copied from: copying is far faster than migrating.
func ensureTemplate(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	name := "tilectl_tmpl_" + schemaHash()
	conn := connectAdmin(ctx, t)
	defer conn.Close(ctx)
	lock(ctx, t, conn, name)
	defer unlock(ctx, conn, name)

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatalf("pgtest: look up template: %v", err)
	}
	if exists {
		return name
	}
	building := name + "_b"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Fatalf("pgtest: clear half-built template: %v", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create template: %v", err)
	}
	m, err := migrations.New(WithDatabase(AdminURL(), building))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := m.Up(); err != nil {
		_ = m.Close()
		t.Fatalf("pgtest: migrate template: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("pgtest: close migrator: %v", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: publish template: %v", err)
	}
	return name
}

func lock(ctx context.Context, t testing.TB, conn *pgx.Conn, key string) {
	t.Helper()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", key); err != nil {
		t.Fatalf("pgtest: advisory lock: %v", err)
	}
}

func unlock(ctx context.Context, conn *pgx.Conn, key string) {
	_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", key)
}

// schemaHash names the template after the migration files' contents, so a
// new migration gets a new template.
func schemaHash() string {
	h := sha256.New()
	names, _ := fs.Glob(migrations.FS, "*.sql")
	sort.Strings(names)
	for _, n := range names {
		b, _ := fs.ReadFile(migrations.FS, n)
		h.Write([]byte(n))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Querier is what RejectionsOverBudget reads through: a *pgx.Conn, a
// *pgxpool.Pool or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// rejectionsOverBudgetSQL is the budget invariant: for each tile of the
// flight, the number of distinct operation IDs whose answer rejected it
// must be at most the per-tile budget ($2) counted from its budget_base
// (migration 0006: a requeue sets budget_base to upload_attempts, giving the
// tile a fresh budget, while the rejections before it stay on record).
const rejectionsOverBudgetSQL = `
SELECT r.tile_id, count(DISTINCT r.op_id)::int
  FROM upload_rejections r JOIN tiles t USING (tile_id)
 WHERE t.flight_id = $1
 GROUP BY r.tile_id, t.budget_base
HAVING count(DISTINCT r.op_id) > t.budget_base + $2
 ORDER BY r.tile_id`

// RejectionsOverBudget returns the flight's tiles that more distinct
// operations rejected than budget allows (counted from a requeued tile's
// budget_base), with how many did: empty when the invariant "a tile at its
// budget is never sent again" holds. The tests of the retry decorator and
// of upload-pending check it on a tile store database.
func RejectionsOverBudget(ctx context.Context, db Querier, flightID string, budget int) (map[string]int, error) {
	rows, err := db.Query(ctx, rejectionsOverBudgetSQL, flightID, budget)
	if err != nil {
		return nil, fmt.Errorf("check rejections over a budget of %d for flight %s: %w", budget, flightID, err)
	}
	out := map[string]int{}
	var id string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("check rejections over a budget of %d for flight %s: %w", budget, flightID, err)
	}
	return out, nil
}

// ResetUploads makes every tile in the database uploadable again (pending,
// no upload, no attempts, in no batch), empties the upload journal, and
// rewrites the tiles table as tiles import leaves it: in tile_id order,
// pages filled to the table's fillfactor. Benchmarks call it between
// measured runs, so each meets the layout of a flight just imported, not
// the one the previous run's updates left (which has more room for the
// claims' updates and would hide part of the journal's cost).
func ResetUploads(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) error {
	for _, q := range []string{
		`TRUNCATE upload_rejections, upload_batches CASCADE`,
		`UPDATE tiles SET voting_status = 'pending', uploaded_at = NULL, upload_attempts = 0, open_op_id = NULL`,
		`CLUSTER tiles USING tiles_pkey`,
		`ANALYZE tiles`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset uploads: %s: %w", q, err)
		}
	}
	return nil
}
