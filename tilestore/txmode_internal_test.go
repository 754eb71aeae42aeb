package tilestore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// The journal's safety argument rests on which commits wait for the disk:
// durable transactions must have synchronous_commit on whatever the
// server's default, relaxed ones off, and no setting may leak to the next
// transaction on the same pooled connection. A claim runs READ COMMITTED
// whatever the default; a settlement turns sequential scans off.
func TestTransactionsRunWithTheirCommitMode(t *testing.T) {
	pool, _ := pgtest.New(t)
	s := NewStore(pool)
	ctx := context.Background()
	db := pgx.Identifier{dbName(t, s)}.Sanitize()
	for _, q := range []string{`ALTER DATABASE ` + db + ` SET synchronous_commit = off`,
		`ALTER DATABASE ` + db + ` SET default_transaction_isolation = 'repeatable read'`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	pool.Reset() // new sessions pick up the database defaults
	const q = `SELECT current_setting('synchronous_commit'), current_setting('transaction_isolation'), current_setting('enable_seqscan')`
	// settings begins a transaction the way the store does (pipelined:
	// its BEGIN queued ahead of the first statement, as claims without a
	// stream and settlements do) and reads its settings.
	settings := func(opts pgx.TxOptions, begin txBegin) (commit, isolation, seqscan string) {
		t.Helper()
		if begin == nil {
			if err := pgx.BeginTxFunc(ctx, pool, opts, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, q).Scan(&commit, &isolation, &seqscan)
			}); err != nil {
				t.Fatal(err)
			}
			return commit, isolation, seqscan
		}
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		b := &pgx.Batch{}
		begin.queue(b)
		b.Queue(q)
		b.Queue("COMMIT")
		br := conn.SendBatch(ctx, b)
		if err := begin.read(br); err != nil {
			t.Fatal(err)
		}
		if err := br.QueryRow().Scan(&commit, &isolation, &seqscan); err != nil {
			t.Fatal(err)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		return commit, isolation, seqscan
	}
	cases := []struct {
		name                       string
		opts                       pgx.TxOptions
		begin                      txBegin
		commit, isolation, seqscan string
	}{
		{"durableTx (inTx)", durableTx, nil, "on", "repeatable read", "on"},
		{"countTx (a count of rejections)", countTx, nil, "off", "repeatable read", "on"},
		{"claimTx (a claim with a stream)", claimTx, nil, "on", "read committed", "on"},
		{"claimBegin (a claim without a stream)", pgx.TxOptions{}, claimBegin, "on", "read committed", "on"},
		{"settleRelaxedBegin", pgx.TxOptions{}, settleRelaxedBegin, "off", "repeatable read", "off"},
		{"settleDurableBegin", pgx.TxOptions{}, settleDurableBegin, "on", "repeatable read", "off"},
	}
	for range 3 { // alternate, on whatever connections the pool hands out
		for _, c := range cases {
			commit, isolation, seqscan := settings(c.opts, c.begin)
			if commit != c.commit || isolation != c.isolation || seqscan != c.seqscan {
				t.Fatalf("%s ran with synchronous_commit=%s, isolation %s, enable_seqscan=%s; want %s, %s, %s",
					c.name, commit, isolation, seqscan, c.commit, c.isolation, c.seqscan)
			}
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
