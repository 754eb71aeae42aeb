package tilestore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// NotUploaded returns up to limit tiles that are not uploaded (any other
// status: their blob may still be needed), of the flight or, with flightID
// "", of every flight, whose tile_id sorts after afterTileID, in tile_id
// order: keyset pages, as PendingUploads.
func (s *Store) NotUploaded(ctx context.Context, flightID, afterTileID string, limit int) ([]Tile, error) {
	if flightID != "" {
		if err := ValidateFlightID(flightID); err != nil {
			return nil, err
		}
	}
	if limit <= 0 {
		return nil, fmt.Errorf("tiles not uploaded of flight %q: limit must be positive, got %d", flightID, limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+tileColumns+` FROM tiles
	WHERE ($1 = '' OR flight_id = $1) AND tile_id > $2 AND voting_status <> 'uploaded'
	ORDER BY tile_id LIMIT $3`, flightID, afterTileID, limit)
	if err != nil {
		return nil, fmt.Errorf("tiles not uploaded of flight %q after %q: %w", flightID, afterTileID, err)
	}
	tiles, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tile, error) { return scanTile(r) })
	if err != nil {
		return nil, fmt.Errorf("tiles not uploaded of flight %q after %q: %w", flightID, afterTileID, err)
	}
	return tiles, nil
}
