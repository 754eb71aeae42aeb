package tilestore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// atBudgetSQL finds uploadable tiles whose counted attempts since their
// last requeue plus uncounted rejections reach the budget ($2, at least
// 1). Every counted attempt of a tile is one of its rejections, marked
// counted: upload_attempts rises only as a count marks them
// (CountRejectionsUpTo). A counted rejection is dropped only once its tile
// is uploaded (PruneJournal), or with its flight; a tile goes back to
// pending, from uploaded or given up, only by a requeue (Requeue,
// RequeueUploaded), which sets budget_base to upload_attempts. So every
// attempt an uploadable tile has counted since then (upload_attempts -
// budget_base) is a counted rejection still kept, and a tile at its
// budget has at least $2 rejections, counted or not: the statement groups
// upload_rejections by tile, keeps the tiles with that many, and looks
// each of those up in tiles by its key, in a correlated subquery so that
// no plan scans the flight's tiles instead, however many rejections there
// are.
const atBudgetSQL = `
SELECT r.tile_id
  FROM (SELECT tile_id, count(*) FILTER (WHERE counted_at IS NULL)::int AS uncounted
          FROM upload_rejections GROUP BY tile_id HAVING count(*) >= $2) r
 WHERE (SELECT t.upload_attempts - t.budget_base FROM tiles t
         WHERE t.tile_id = r.tile_id AND t.flight_id = $1 AND t.voting_status IN ('pending', 'trusted'))
       + r.uncounted >= $2
 ORDER BY r.tile_id`

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
