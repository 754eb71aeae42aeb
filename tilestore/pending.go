package tilestore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// pendingUploadsSQL repeats the partial index tiles_pending_idx's predicate
// literally so the planner can use it: do not parameterise the statuses.
const pendingUploadsSQL = `SELECT ` + tileColumns + ` FROM tiles
	WHERE flight_id = $1 AND tile_id > $2 AND voting_status IN ('pending', 'trusted')
	ORDER BY tile_id LIMIT $3`

// PendingUploads returns up to limit of the flight's uploadable tiles
// (pending or trusted) whose tile_id sorts after afterTileID, in tile_id
// order. Pass "" to start and the last ID of a page to get the next one:
// keyset paging costs the same on the last page as on the first.
func (s *Store) PendingUploads(ctx context.Context, flightID, afterTileID string, limit int) ([]Tile, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("pending uploads of flight %s: limit must be positive, got %d", flightID, limit)
	}
	rows, err := s.pool.Query(ctx, pendingUploadsSQL, flightID, afterTileID, limit)
	if err != nil {
		return nil, fmt.Errorf("pending uploads of flight %s after %q: %w", flightID, afterTileID, err)
	}
	tiles, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tile, error) { return scanTile(r) })
	if err != nil {
		return nil, fmt.Errorf("pending uploads of flight %s after %q: %w", flightID, afterTileID, err)
	}
	return tiles, nil
}

// PendingSummary counts the flight's uploadable tiles and their bytes,
// those in other runs' open batches included: they are not uploaded until
// their batches settle (Leases says who holds them).
func (s *Store) PendingSummary(ctx context.Context, flightID string) (tiles int, bytes int64, err error) {
	if err := ValidateFlightID(flightID); err != nil {
		return 0, 0, err
	}
	const q = `SELECT count(*), coalesce(sum(size_bytes), 0)::bigint FROM tiles
	WHERE flight_id = $1 AND voting_status IN ('pending', 'trusted')`
	if err := s.pool.QueryRow(ctx, q, flightID).Scan(&tiles, &bytes); err != nil {
		return 0, 0, fmt.Errorf("pending summary of flight %s: %w", flightID, err)
	}
	return tiles, bytes, nil
}
