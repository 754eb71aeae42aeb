package optable_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/provider/optable"
	"github.com/tilectl/tilectl/provider/optable/optabletest"
)

func memoryHarness() optabletest.Harness {
	return optabletest.Harness{
		New:     func(*testing.T) optable.Store { return optable.NewMemoryStore() },
		Restart: func(_ *testing.T, s optable.Store) optable.Store { return s },
	}
}

// pgHarness shares one database across a run; New empties the tables.
// Restart opens a new PGStore, as a restarted process would, on the same
// pool: the store keeps no session state, and a pool per restart would
// exhaust the server's connections in long model runs.
func pgHarness(t *testing.T) optabletest.Harness {
	t.Helper()
	pool := newPGPool(t)
	open := func() optable.Store { return optable.NewPGStore(pool) }
	return optabletest.Harness{
		New: func(t *testing.T) optable.Store {
			if _, err := pool.Exec(context.Background(), "TRUNCATE operation_records, client_sequences"); err != nil {
				t.Fatal(err)
			}
			return open()
		},
		Restart: func(*testing.T, optable.Store) optable.Store { return open() },
	}
}

func newPGPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	_, url := pgtest.New(t)
	pool := openPool(t, url)
	if err := optable.EnsureSchema(context.Background(), pool); err != nil {
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
	optabletest.Run(t, memoryHarness())
}

func TestPGStoreConformance(t *testing.T) {
	t.Parallel()
	optabletest.Run(t, pgHarness(t))
}
