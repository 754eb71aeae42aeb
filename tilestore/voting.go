package tilestore

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// setStatusSQL moves the named tiles to $2 in one statement and reports how
// many changed and which IDs name no tile. An uploaded tile is never moved:
// the provider has it, whatever the vote says later. uploaded_at is set the
// first time a tile becomes uploaded.
const setStatusSQL = `
WITH ids AS (SELECT DISTINCT unnest($1::text[]) AS tile_id),
upd AS (
    UPDATE tiles t
       SET voting_status = $2,
           uploaded_at = CASE WHEN $2 = 'uploaded' THEN coalesce(t.uploaded_at, now()) ELSE t.uploaded_at END
      FROM ids
     WHERE t.tile_id = ids.tile_id AND t.voting_status <> 'uploaded' AND t.voting_status <> $2
    RETURNING t.tile_id
)
SELECT (SELECT count(*) FROM upd)::int,
       coalesce((SELECT array_agg(ids.tile_id) FROM ids
                  WHERE NOT EXISTS (SELECT 1 FROM tiles t WHERE t.tile_id = ids.tile_id)), '{}')`

// setStatus runs setStatusSQL in a transaction it rolls back when an ID is
// unknown, so a call naming a missing tile changes nothing.
func (s *Store) setStatus(ctx context.Context, ids []string, st VotingStatus) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	if err := validateTileIDs(ids); err != nil {
		return 0, err
	}
	var changed int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var unknown []string
		if err := tx.QueryRow(ctx, setStatusSQL, ids, string(st)).Scan(&changed, &unknown); err != nil {
			return err
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return &UnknownTilesError{IDs: unknown}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return changed, nil
}

// MarkUploaded marks tiles uploaded in one statement and returns how many
// were not uploaded before. Any unknown ID makes it change nothing and
// return an *UnknownTilesError.
func (s *Store) MarkUploaded(ctx context.Context, ids []string) (int, error) {
	n, err := s.setStatus(ctx, ids, StatusUploaded)
	if err != nil {
		return 0, fmt.Errorf("mark %d tiles uploaded: %w", len(ids), err)
	}
	return n, nil
}
