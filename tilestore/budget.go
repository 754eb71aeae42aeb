package tilestore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// atBudgetSQL finds uploadable tiles whose counted attempts plus uncounted
// rejections reach the budget ($2). The uncounted side is read through the
// partial index on uncounted rejections, which is small.
const atBudgetSQL = `
SELECT t.tile_id
  FROM tiles t
  LEFT JOIN (SELECT tile_id, count(*)::int AS n FROM upload_rejections
              WHERE counted_at IS NULL GROUP BY tile_id) u USING (tile_id)
 WHERE t.flight_id = $1 AND t.voting_status IN ('pending', 'trusted')
   AND t.upload_attempts - t.budget_base + coalesce(u.n, 0) >= $2
 ORDER BY t.tile_id`

// AtBudget returns the flight's uploadable tiles whose upload_attempts plus
// uncounted rejections reach maxAttempts, in tile_id order: the next count
// gives them up, so a run that does not count (upload-pending --no-retry)
// must not send them.
func (s *Store) AtBudget(ctx context.Context, flightID string, maxAttempts int) ([]string, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	if maxAttempts < 1 {
		return nil, fmt.Errorf("tiles at their budget in flight %s: max attempts must be at least 1, got %d", flightID, maxAttempts)
	}
	rows, err := s.pool.Query(ctx, atBudgetSQL, flightID, maxAttempts)
	if err != nil {
		return nil, fmt.Errorf("tiles at their budget of %d in flight %s: %w", maxAttempts, flightID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("tiles at their budget of %d in flight %s: %w", maxAttempts, flightID, err)
	}
	return ids, nil
}
