package tilestore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// The journal's safety argument rests on which commits wait for the disk:
// durable transactions must have synchronous_commit on whatever the
// server's default, relaxed ones off, and neither may leak to the next
// transaction on the same pooled connection.
func TestTransactionsRunWithTheirCommitMode(t *testing.T) {
	pool, _ := pgtest.New(t)
	s := NewStore(pool)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{dbName(t, s)}.Sanitize()+` SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // new sessions pick up the database default: off
	mode := func(run func(context.Context, func(pgx.Tx) error) error) string {
		t.Helper()
		var got string
		if err := run(ctx, func(tx pgx.Tx) error { return tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got) }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i := 0; i < 3; i++ { // alternate, on whatever connections the pool hands out
		if got := mode(s.inTx); got != "on" {
			t.Fatalf("inTx ran with synchronous_commit=%s, want on", got)
		}
		if got := mode(s.inRelaxedTx); got != "off" {
			t.Fatalf("inRelaxedTx ran with synchronous_commit=%s, want off", got)
		}
	}
}

func dbName(t *testing.T, s *Store) string {
	t.Helper()
	var name string
	if err := s.pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}
