package tilestore

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// Postgres answers the COMMIT of a failed transaction with the tag
// ROLLBACK and no error. The store's own commits (queueCommit, commit)
// report such a COMMIT as an error, in every exec mode a database URL
// may choose, and leave the connection out of any transaction; a COMMIT
// of a transaction with no failed statement still succeeds.
func TestTheStoresCommitsReportACommitThatRolledBack(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pipelined := func(ctx context.Context, conn *pgx.Conn) error {
		w := &pgx.Batch{}
		queueCommit(w)
		return conn.SendBatch(ctx, w).Close()
	}
	own := func(ctx context.Context, conn *pgx.Conn) error { return commit(ctx, conn) }
	for _, mode := range []string{"cache_statement", "exec", "simple_protocol"} {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("default_query_exec_mode", mode)
		u.RawQuery = q.Encode()
		conn, err := pgx.Connect(ctx, u.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		for name, commitOn := range map[string]func(context.Context, *pgx.Conn) error{"queueCommit": pipelined, "commit": own} {
			for _, failed := range []bool{false, true} {
				if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
					t.Fatal(err)
				}
				stmt := "SELECT 1"
				if failed {
					stmt = "SELECT 1/0"
				}
				if _, err := conn.Exec(ctx, stmt); (err != nil) != failed {
					t.Fatalf("%s: %s: err = %v", mode, stmt, err)
				}
				err := commitOn(ctx, conn)
				if failed && !errors.Is(err, errNotCommitted) {
					t.Errorf("%s, %s: the COMMIT of a failed transaction returned %v, want errNotCommitted", mode, name, err)
				}
				if !failed && err != nil {
					t.Errorf("%s, %s: the COMMIT of a transaction without a failed statement returned %v", mode, name, err)
				}
				if st := conn.PgConn().TxStatus(); st != 'I' {
					t.Fatalf("%s, %s: connection left in transaction status %c", mode, name, st)
				}
			}
		}
	}
}
