package tilestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ambiguousPendingSQL finds the flight's uploadable tiles that travelled
// under a key whose answer settled nothing clear for them: members of a
// failed batch, or tiles rejected with ReasonProtocolError (an omitted or
// unclear result), read through upload_rejections_unclear_idx.
const ambiguousPendingSQL = `
WITH cand AS (
    SELECT unnest(tile_ids) AS tile_id FROM upload_batches WHERE flight_id = $1 AND state = 'failed'
    UNION
    SELECT r.tile_id FROM upload_rejections r JOIN tiles t ON t.tile_id = r.tile_id
     WHERE t.flight_id = $1 AND r.reason = '` + ReasonProtocolError + `'
)
SELECT ` + tileColumns + ` FROM tiles
 WHERE flight_id = $1 AND voting_status IN ('pending', 'trusted') AND open_op_id IS NULL
   AND tile_id IN (SELECT tile_id FROM cand)
 ORDER BY tile_id`

// AmbiguousPending returns, in tile_id order, the flight's uploadable tiles
// that an earlier batch may have stored although its key settled nothing
// for them: members of a failed batch (its key expired, conflicted, or the
// provider reported the operation absent or indeterminate), and tiles
// rejected with ReasonProtocolError. The uploader asks the provider about
// these before sending them under a new key. A tile in an open batch (of
// any run) is not among them: that batch may still store it.
//
// asOf is the database's clock just before the read: the caller passes it
// as Claim.LookedUpAt, so a failure recorded after it (another run sent
// the tile again meanwhile) makes the lookup stale for that tile.
func (s *Store) AmbiguousPending(ctx context.Context, flightID string) (tiles []Tile, asOf time.Time, err error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, time.Time{}, err
	}
	if err := s.pool.QueryRow(ctx, `SELECT statement_timestamp()`).Scan(&asOf); err != nil {
		return nil, time.Time{}, fmt.Errorf("tiles of flight %s whose earlier batch left them unsettled: read the clock: %w", flightID, err)
	}
	rows, err := s.pool.Query(ctx, ambiguousPendingSQL, flightID)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("tiles of flight %s whose earlier batch left them unsettled: %w", flightID, err)
	}
	tiles, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tile, error) { return scanTile(r) })
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("tiles of flight %s whose earlier batch left them unsettled: %w", flightID, err)
	}
	return tiles, asOf, nil
}
