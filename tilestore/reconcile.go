package tilestore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Uploaded returns up to limit of the flight's uploaded tiles whose tile_id
// sorts after afterTileID, in tile_id order: keyset pages, as
// PendingUploads, for checking them against the provider (tiles reconcile).
func (s *Store) Uploaded(ctx context.Context, flightID, afterTileID string, limit int) ([]Tile, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("uploaded tiles of flight %s: limit must be positive, got %d", flightID, limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+tileColumns+` FROM tiles
	WHERE flight_id = $1 AND voting_status = 'uploaded' AND tile_id > $2
	ORDER BY tile_id LIMIT $3`, flightID, afterTileID, limit)
	if err != nil {
		return nil, fmt.Errorf("uploaded tiles of flight %s after %q: %w", flightID, afterTileID, err)
	}
	tiles, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tile, error) { return scanTile(r) })
	if err != nil {
		return nil, fmt.Errorf("uploaded tiles of flight %s after %q: %w", flightID, afterTileID, err)
	}
	return tiles, nil
}

// RequeueUploaded moves uploaded tiles of a flight that the provider turned
// out not to hold (or to hold with other bytes) back to pending, so the
// next upload claims them into new batches under new keys. As Requeue, the
// attempts already spent stay and the budget counts from here; uploaded_at
// is cleared, so it says when the tile arrives again. Named tiles that are
// no longer uploaded (already requeued, or of another flight) are left as
// they are and not returned. beforeCommit (if not nil) runs in the
// transaction with the moved tiles, before commit; its error rolls back.
func (s *Store) RequeueUploaded(ctx context.Context, flightID string, ids []string,
	beforeCommit func(ctx context.Context, rs []Requeued) error) ([]Requeued, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	if err := validateTileIDs(ids); err != nil {
		return nil, err
	}
	var out []Requeued
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = requeueRows(ctx, tx, beforeCommit, `UPDATE tiles SET `+requeueSet+`, uploaded_at = NULL
			WHERE flight_id = $1 AND tile_id = ANY($2) AND voting_status = 'uploaded'
			RETURNING `+requeueReturning, flightID, ids)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("requeue %d uploaded tiles of flight %s: %w", len(ids), flightID, err)
	}
	return out, nil
}
