package tilestore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// IncrementUploadAttempts adds one to a tile's upload_attempts and returns
// the new count. It is one UPDATE ... RETURNING, so concurrent callers never
// lose an increment. An unknown tile gives an *UnknownTilesError
// (errors.Is(err, ErrTileNotFound)).
func (s *Store) IncrementUploadAttempts(ctx context.Context, id string) (int, error) {
	if err := ValidateTileID(id); err != nil {
		return 0, err
	}
	var n int
	err := s.pool.QueryRow(ctx,
		`UPDATE tiles SET upload_attempts = upload_attempts + 1 WHERE tile_id = $1 RETURNING upload_attempts`,
		id).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("increment upload attempts: %w", &UnknownTilesError{IDs: []string{id}})
	}
	if err != nil {
		return 0, fmt.Errorf("increment upload attempts of tile %s: %w", id, err)
	}
	return n, nil
}

// incrementManySQL adds, in one statement, each ID's number of occurrences
// in $1 to its tile's upload_attempts. The locked CTE takes the row locks in
// tile_id order (LockRows sits above the Sort), so two callers with
// overlapping sets in different orders queue instead of deadlocking. When
// any ID is unknown the UPDATE's guard makes it change nothing, and the
// final SELECT says which IDs were unknown.
const incrementManySQL = `
WITH req AS (
    SELECT tile_id, count(*)::int AS n FROM unnest($1::text[]) AS u(tile_id) GROUP BY tile_id
), locked AS MATERIALIZED (
    SELECT t.tile_id FROM tiles t WHERE t.tile_id IN (SELECT tile_id FROM req)
     ORDER BY t.tile_id FOR UPDATE
), upd AS (
    UPDATE tiles t SET upload_attempts = t.upload_attempts + req.n
      FROM req
     WHERE t.tile_id = req.tile_id
       AND (SELECT count(*) FROM locked) = (SELECT count(*) FROM req)
    RETURNING t.tile_id, t.upload_attempts
)
SELECT req.tile_id, l.tile_id IS NOT NULL, coalesce(upd.upload_attempts, 0)
  FROM req LEFT JOIN locked l USING (tile_id) LEFT JOIN upd USING (tile_id)
 ORDER BY req.tile_id`

// IncrementUploadAttemptsMany adds one attempt per occurrence of each ID (an
// ID listed twice counts twice) in one statement, and returns every named
// tile's new count. If any ID is unknown nothing changes and the error is an
// *UnknownTilesError naming them.
func (s *Store) IncrementUploadAttemptsMany(ctx context.Context, ids []string) (map[string]int, error) {
	if len(ids) == 0 {
		return map[string]int{}, nil
	}
	if err := validateTileIDs(ids); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, incrementManySQL, ids)
	if err != nil {
		return nil, fmt.Errorf("increment upload attempts of %d tiles: %w", len(ids), err)
	}
	out := make(map[string]int, len(ids))
	var unknown []string
	var id string
	var known bool
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &known, &n}, func() error {
		if known {
			out[id] = n
		} else {
			unknown = append(unknown, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("increment upload attempts of %d tiles: %w", len(ids), err)
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("increment upload attempts: %w", &UnknownTilesError{IDs: unknown})
	}
	return out, nil
}
