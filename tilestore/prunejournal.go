package tilestore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// finishedFlightsSQL lists the flights ($1, "" for every one) that are
// finished: no tile waits to be sent (pending or trusted) and no batch is
// open. Nothing then reads their settled batches again: a claim, a lookup
// and a settlement all start from a tile that is pending or a batch that
// is open.
const finishedFlightsSQL = `
SELECT f.flight_id FROM flights f
 WHERE ($1 = '' OR f.flight_id = $1)
   AND NOT EXISTS (SELECT 1 FROM tiles t WHERE t.flight_id = f.flight_id AND t.voting_status IN ('pending', 'trusted'))
   AND NOT EXISTS (SELECT 1 FROM upload_batches b WHERE b.flight_id = f.flight_id AND b.state = 'open')
 ORDER BY f.flight_id`

// pruneJournalSQL drops one finished flight's ($1) journal rows that no
// command reads again, in one statement, and says how many and how large
// they were. Kept: every tile row (status, attempts, give-up, whether its
// blob is pruned), the run history (upload_runs), every open batch, a
// failed batch that names a tile not uploaded (a given-up tile requeued
// later is looked up at the provider before it is sent under a new key:
// the failed batch is what says so), and every rejection of a tile not
// uploaded, or not yet counted. What it drops stays safe to drop if the
// flight stops being finished meanwhile (a requeue, then a claim): it
// names only uploaded tiles, or batches that are settled, which nothing
// sends or settles again.
const pruneJournalSQL = `
WITH still AS (
    SELECT 1 FROM flights WHERE flight_id = $1
       AND NOT EXISTS (SELECT 1 FROM tiles t WHERE t.flight_id = $1 AND t.voting_status IN ('pending', 'trusted'))
       AND NOT EXISTS (SELECT 1 FROM upload_batches b WHERE b.flight_id = $1 AND b.state = 'open')
), batches AS (
    DELETE FROM upload_batches b
     WHERE b.flight_id = $1 AND EXISTS (SELECT 1 FROM still)
       AND (b.state = 'settled'
            OR (b.state = 'failed' AND NOT EXISTS (
                SELECT 1 FROM tiles t WHERE t.tile_id = ANY(b.tile_ids) AND t.voting_status <> 'uploaded')))
    RETURNING pg_column_size(b.*) AS bytes
), rejections AS (
    DELETE FROM upload_rejections r USING tiles t
     WHERE t.tile_id = r.tile_id AND t.flight_id = $1 AND EXISTS (SELECT 1 FROM still)
       AND t.voting_status = 'uploaded' AND r.counted_at IS NOT NULL
    RETURNING pg_column_size(r.*) AS bytes
)
SELECT EXISTS (SELECT 1 FROM still),
       (SELECT count(*) FROM batches), (SELECT coalesce(sum(bytes), 0) FROM batches)::bigint,
       (SELECT count(*) FROM rejections), (SELECT coalesce(sum(bytes), 0) FROM rejections)::bigint`

// PruneJournal drops the journal rows that finished flights (flightID, ""
// for every one) no longer need: their settled batches with their member
// lists, failed batches whose members are all uploaded, and the counted
// rejections of their uploaded tiles. dryRun measures and rolls back.
func (s *Store) PruneJournal(ctx context.Context, flightID string, dryRun bool) (JournalPrune, error) {
	var out JournalPrune
	if flightID != "" {
		if err := ValidateFlightID(flightID); err != nil {
			return out, err
		}
	}
	rows, err := s.pool.Query(ctx, finishedFlightsSQL, flightID)
	if err != nil {
		return out, fmt.Errorf("prune the upload journal: list finished flights: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return out, fmt.Errorf("prune the upload journal: list finished flights: %w", err)
	}
	for _, id := range ids {
		var done bool
		var nb, bb, nr, rb int64
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, pruneJournalSQL, id).Scan(&done, &nb, &bb, &nr, &rb); err != nil {
				return err
			}
			if dryRun {
				return errDryRun
			}
			return nil
		})
		if err != nil && !(dryRun && err == errDryRun) {
			return out, fmt.Errorf("prune the upload journal of flight %s: %w", id, err)
		}
		if !done {
			continue // a tile or a batch came back meanwhile: not finished
		}
		out.Flights = append(out.Flights, id)
		out.Batches += nb
		out.Rejections += nr
		out.RowBytes += bb + rb
	}
	return out, nil
}

// JournalBytes is the space the upload journal's tables (upload_batches,
// upload_rejections, their indexes and TOAST) and the tiles table take in
// the database (pg_total_relation_size).
func (s *Store) JournalBytes(ctx context.Context) (journal, tiles int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT pg_total_relation_size('upload_batches') + pg_total_relation_size('upload_rejections'),
		pg_total_relation_size('tiles')`).Scan(&journal, &tiles)
	if err != nil {
		return 0, 0, fmt.Errorf("measure the journal's tables: %w", err)
	}
	return journal, tiles, nil
}
