package operation_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/operation/operationtest"
)

func memoryHarness() operationtest.Harness {
	return operationtest.Harness{
		New:     func(*testing.T) operation.Store { return operation.NewMemoryStore() },
		Restart: func(_ *testing.T, s operation.Store) operation.Store { return s },
	}
}

// pgHarness shares one database across a run; New empties the tables.
// Restart opens a new PGStore, as a restarted process would, on the same
// pool: the store keeps no session state, and a pool per restart would
// exhaust the server's connections in long model runs.
func pgHarness(t *testing.T) operationtest.Harness {
	t.Helper()
	pool := newPGPool(t)
	open := func() operation.Store { return operation.NewPGStore(pool) }
	return operationtest.Harness{
		New: func(t *testing.T) operation.Store {
			if _, err := pool.Exec(context.Background(), "TRUNCATE operation_records, client_sequences"); err != nil {
				t.Fatal(err)
			}
			return open()
		},
		Restart: func(*testing.T, operation.Store) operation.Store { return open() },
	}
}

func newPGPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	_, url := pgtest.New(t)
	pool := openPool(t, url)
	if err := operation.EnsureSchema(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// openPool opens a pool on url.
func openPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20 // the one-owner test races 16 connections
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	operationtest.Run(t, memoryHarness())
}

func TestPGStoreConformance(t *testing.T) {
	t.Parallel()
	operationtest.Run(t, pgHarness(t))
}
