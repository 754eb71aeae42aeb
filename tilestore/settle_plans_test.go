package tilestore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

// TestASettlementPlansNoStatementForItsValues: a settlement's statements
// find their rows by key, so a plan made for the values (a custom plan,
// which Postgres makes for the first five runs of a statement on each
// connection before it weighs the generic one) would be the generic
// plan, made again each time. A run's settlements are a few dozen spread
// over its pool's connections: most of them would pay for planning.
func TestASettlementPlansNoStatementForItsValues(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	seeder, url := pgtest.New(t)
	seedFlight(t, tilestore.NewStore(seeder), "FP", 40)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // the claims and settlements on the connection read below
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := tilestore.NewStore(pool)
	for i := range 4 {
		op := fmt.Sprintf("op-p%d", i)
		c := mustClaim(t, ctx, s, tilestore.Claim{FlightID: "FP", Limit: 10, OpID: op, Pick: pickAll(op)})
		st := tilestore.Settlement{OpID: op, Uploaded: c.Batch.TileIDs[1:], HTTPStatus: 200}
		if i%2 == 1 { // the other form: one member rejected
			st.Rejections = []tilestore.Rejection{{OpID: op, TileID: c.Batch.TileIDs[0], Reason: "invalid_tile"}}
		} else {
			st.Uploaded = c.Batch.TileIDs
		}
		if err := s.SettleBatch(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := pool.Query(context.Background(), `SELECT left(regexp_replace(statement, '\s+', ' ', 'g'), 70), custom_plans
		FROM pg_prepared_statements WHERE custom_plans > 0`)
	if err != nil {
		t.Fatal(err)
	}
	type planned struct {
		Statement string
		Custom    int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[planned])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		t.Errorf("planned for its values %d time(s): %s", p.Custom, p.Statement)
	}
}
