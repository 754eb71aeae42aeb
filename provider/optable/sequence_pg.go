package optable

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PGSequenceStore keeps last committed sequences in client_sequences
// (created by EnsureSchema). Sequences are stored as BIGINT, so they must
// stay below 2^63.
type PGSequenceStore struct{ pool *pgxpool.Pool }

var _ SequenceStore = (*PGSequenceStore)(nil)

// NewPGSequenceStore returns a store over pool.
func NewPGSequenceStore(pool *pgxpool.Pool) *PGSequenceStore { return &PGSequenceStore{pool: pool} }

// Last implements SequenceStore.
func (s *PGSequenceStore) Last(ctx context.Context, scope, clientID string) (uint64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT last_committed FROM client_sequences WHERE scope = $1 AND client_id = $2`,
		scope, clientID).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read sequence of client %s: %w", clientID, err)
	}
	return uint64(n), nil
}

// Advance implements SequenceStore: a conditional UPDATE for every batch
// after a client's first, an INSERT that loses to any existing row for the
// first. Each is one statement, so concurrent advances cannot both win.
func (s *PGSequenceStore) Advance(ctx context.Context, scope, clientID string, n uint64) (bool, error) {
	if n == 0 || n > math.MaxInt64 {
		return false, fmt.Errorf("advance sequence of client %s: %d out of range", clientID, n)
	}
	sql := `UPDATE client_sequences SET last_committed = $3, updated_at = now()
		WHERE scope = $1 AND client_id = $2 AND last_committed = $3 - 1`
	if n == 1 {
		sql = `INSERT INTO client_sequences (scope, client_id, last_committed) VALUES ($1, $2, $3)
		ON CONFLICT (scope, client_id) DO NOTHING`
	}
	tag, err := s.pool.Exec(ctx, sql, scope, clientID, int64(n))
	if err != nil {
		return false, fmt.Errorf("advance sequence of client %s to %d: %w", clientID, n, err)
	}
	return tag.RowsAffected() == 1, nil
}
