package tilestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// countRejectionsSQLFor does all of CountRejectionsUpTo's writes in one
// statement. unc locks the flight's uncounted rejections after $4 and
// their tiles in tile_id order, so a concurrent count waits and then finds
// nothing left to count. It reads the partial index of uncounted
// rejections from the cursor on and checks each one's flight through its
// tile's primary key, so that it costs what the chunk holds (a join with
// tiles could hash every tile of the flight, or walk tiles_pkey from the
// first tile, for each chunk). A chunk ends at the $5th tile with
// uncounted rejections of the flight (tile_id order): an initplan finds
// that tile the same way, and unc reads the index range up to it, each
// rejection once. per sums them per tile and takes the newest one's
// reason, message and time, all from one sort of unc (an ordered
// aggregate sorts each tile's rows again for each aggregate); mark sets
// counted_at (its rows are unc's, locked and still uncounted: saying so
// lets it find them through the partial index of uncounted rejections
// instead of joining the whole table per chunk); upd adds the counts
// and moves uploadable tiles that reached the budget ($2), or were
// rejected too_large ($3), to upload_giveup.
// generation names the give-up: a tile leaves upload_giveup only by a
// requeue, which counts requeues up and never resets it, so requeues + 1
// numbers each of the tile's give-ups (its first is 1) and the FDR key
// built from it is new for each. old_status is read under the lock, so
// "gave up now" is exact: the status changed in this statement.
//
// mark and upd find their rows by key, not by the ctid unc read: a row
// another transaction changed while the count waited for its lock is
// locked in its newest version, which this statement's snapshot does not
// see, so a write by ctid would skip it
// (TestCountRejectionsCountsRowsChangedWhileItWaited). The mark is never a
// HOT update: upload_rejections_uncounted_idx, which every reader of
// uncounted rejections needs, has counted_at in its predicate, so each
// marked row gets a new entry in the primary key (and, a protocol_error
// rejection, in upload_rejections_unclear_idx).
// countRejectionsSQL is the statement for every tile after the cursor
// (chunk false) or for a chunk of $5 tiles. They are two texts, not one
// with "$5 IS NULL OR", because a generic plan of that cannot bound the
// index scan: every chunk would read to the end of the flight.
var countRejectionsSQL = map[bool]string{false: countRejectionsSQLFor(false), true: countRejectionsSQLFor(true)}

func countRejectionsSQLFor(chunk bool) string {
	bound := ""
	if chunk {
		bound = `
       AND r.tile_id <= (
            SELECT max(p.tile_id) FROM (
                SELECT DISTINCT q.tile_id
                  FROM upload_rejections q
                 WHERE q.counted_at IS NULL AND q.tile_id > $4
                   AND (SELECT f.flight_id FROM tiles f WHERE f.tile_id = q.tile_id) = $1
                 ORDER BY q.tile_id
                 LIMIT $5) p)`
	}
	return `
WITH unc AS (
    SELECT r.op_id, r.tile_id, r.reason, r.message, r.rejected_at, t.voting_status AS old_status
      FROM upload_rejections r JOIN tiles t ON t.tile_id = r.tile_id
     WHERE r.counted_at IS NULL AND t.flight_id = $1 AND r.tile_id > $4` + bound + `
     ORDER BY r.tile_id, r.op_id
       FOR UPDATE OF r, t
), per AS (
    SELECT tile_id, (count(*) OVER w)::int AS n,
           first_value(reason) OVER w AS reason,
           first_value(message) OVER w AS message,
           first_value(rejected_at) OVER w AS rejected_at,
           min(old_status) OVER w AS old_status,
           bool_or(reason = $3) OVER w AS final,
           row_number() OVER w AS i
      FROM unc
    WINDOW w AS (PARTITION BY tile_id ORDER BY rejected_at DESC, op_id DESC ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
), mark AS (
    UPDATE upload_rejections r SET counted_at = now()
      FROM unc WHERE r.op_id = unc.op_id AND r.tile_id = unc.tile_id AND r.counted_at IS NULL
), upd AS (
    UPDATE tiles t
       SET upload_attempts = t.upload_attempts + per.n,
           last_rejection_reason = per.reason,
           last_rejection_message = per.message,
           last_rejected_at = per.rejected_at,
           voting_status = CASE WHEN (t.upload_attempts + per.n - t.budget_base >= $2 OR per.final) AND t.voting_status IN ('pending', 'trusted')
                                THEN 'upload_giveup' ELSE t.voting_status END,
           gave_up_at = CASE WHEN (t.upload_attempts + per.n - t.budget_base >= $2 OR per.final) AND t.voting_status IN ('pending', 'trusted')
                             THEN now() ELSE t.gave_up_at END
      FROM per WHERE t.tile_id = per.tile_id AND per.i = 1
    RETURNING t.tile_id, t.flight_id, t.upload_attempts, per.n,
              t.voting_status = 'upload_giveup' AND per.old_status IN ('pending', 'trusted') AS gave_up,
              coalesce(t.last_rejection_reason, '') AS reason, coalesce(t.last_rejection_message, '') AS message,
              t.gave_up_at, t.requeues + 1 AS generation
)
SELECT tile_id, flight_id, upload_attempts, n, gave_up, reason, message, gave_up_at, generation FROM upd ORDER BY tile_id`
}

// ReasonTooLarge is the rejection reason of a tile over the provider's
// limits. Retrying the same bytes can never help, so counting such a
// rejection gives the tile up at once, whatever its attempts; `tiles
// requeue` brings it back once the provider raises its limits.
const ReasonTooLarge = "too_large"

// ReasonProtocolError is the rejection reason the client records for a
// tile an answer did not clearly settle (see uploader.ReasonProtocolError):
// the only unclear reason. Such a tile awaits a lookup before it travels
// under a new key (AmbiguousPending, Claim.LookedUp). The claims and
// AmbiguousPending read these rejections through
// upload_rejections_unclear_idx, which holds only them, so the SQL names
// the reason itself: a partial index serves only a condition its
// predicate is proved from when the statement is planned.
const ReasonProtocolError = "protocol_error"

// uncountedExistSQL reads the partial index of uncounted rejections after
// the cursor $2, in tile_id order, and checks each one's flight through its
// tile's primary key, so it stops at the flight's first uncounted
// rejection. Where pgx prepares its statement once per connection, it may
// run on a generic plan (Postgres weighs one after five runs), made
// without the cursor or the flight: written as a
// join, that plan could merge the index with tiles_pkey and walk every
// tile from the cursor up to the first uncounted rejection's
// (TestTheLookForUncountedRejectionsReadsOnlyThem).
const uncountedExistSQL = `SELECT EXISTS (SELECT 1 FROM upload_rejections r
	WHERE r.counted_at IS NULL AND r.tile_id > $2
	  AND (SELECT t.flight_id FROM tiles t WHERE t.tile_id = r.tile_id) = $1)`

// CountRejectionsUpTo adds the uncounted rejections of the flight's first
// maxTiles tiles (in tile_id order) after the tile ID after ("" for the
// first) to their upload_attempts, exactly once each, and moves uploadable
// tiles whose attempts reach maxAttempts, or with a ReasonTooLarge
// rejection among those counted, to upload_giveup, all in one transaction.
// maxTiles 0 means all the flight's tiles. It counted every tile there was
// after after when len(result.Attempts) < maxTiles; otherwise result.Last
// is the after of the next chunk. The give-ups it returns are durable; a
// count without give-ups may be lost in a crash, and is then made again
// from the same rejections by the next call.
//
// If any tile gave up and beforeCommit is not nil, it is called inside the
// transaction, before commit, with the give-ups (tile_id order); if it
// returns an error everything is rolled back (attempts unchanged,
// rejections still uncounted) and the error is returned. A later call then
// recounts the same rejections and reaches the same give-ups, so a hook
// that writes an idempotent record per give-up writes it exactly once.
//
// A caller that must write a record per give-up before the commit (the
// flight data recorder, whose ring holds only so many) bounds with
// maxTiles what one commit depends on, and passes the cursor so that each
// chunk costs the same however many came before it
// (BenchmarkCountRejectionsChunked). A rejection recorded behind the
// cursor meanwhile is counted by the next count, as one recorded just
// after the last chunk would be.
func (s *Store) CountRejectionsUpTo(ctx context.Context, flightID string, maxAttempts, maxTiles int, after string,
	beforeCommit func(ctx context.Context, gaveUp []GiveUp) error) (CountResult, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return CountResult{}, err
	}
	if maxAttempts < 1 {
		return CountResult{}, fmt.Errorf("count rejections of flight %s: max attempts must be at least 1, got %d", flightID, maxAttempts)
	}
	if maxTiles < 0 {
		return CountResult{}, fmt.Errorf("count rejections of flight %s: max tiles must be 0 (all) or more, got %d", flightID, maxTiles)
	}
	args := []any{flightID, maxAttempts, ReasonTooLarge, after}
	if maxTiles > 0 {
		args = append(args, maxTiles)
	}
	// The common case, nothing to count, costs one read and no
	// transaction (the decorator counts before every inner call, and after
	// one that failed or recorded rejections).
	// A rejection recorded just after this read is counted by the next
	// call, exactly as one recorded just after the transaction would be.
	var found bool
	if err := s.pool.QueryRow(ctx, uncountedExistSQL, flightID, after).Scan(&found); err != nil {
		return CountResult{}, fmt.Errorf("count rejections of flight %s: look for uncounted ones: %w", flightID, err)
	}
	if !found {
		return CountResult{Attempts: map[string]int{}}, nil
	}
	// The commit waits for the disk only when a tile gave up, which the
	// caller reports once this returns (and beforeCommit may have written
	// a durable record of): a count lost in a crash without give-ups is
	// made again from the same rejections, which were committed durably
	// (SettleBatch, ClaimBatch), and its increments and counted marks are
	// lost together. Postgres flushes the WAL in order, so any later
	// synchronous commit (SyncJournal at the end of a run, the next
	// give-up) makes such a count durable too, and a crash never keeps a
	// later commit that read it without keeping it.
	var res CountResult
	err := pgx.BeginTxFunc(ctx, s.pool, countTx, func(tx pgx.Tx) error {
		res = CountResult{Attempts: map[string]int{}}
		rows, err := tx.Query(ctx, countRejectionsSQL[maxTiles > 0], args...)
		if err != nil {
			return err
		}
		var g GiveUp
		var n int
		var gaveUp bool
		var gaveUpAt *time.Time
		_, err = pgx.ForEachRow(rows, []any{&g.TileID, &g.FlightID, &g.Attempts, &n, &gaveUp, &g.LastReason, &g.LastMessage, &gaveUpAt, &g.Generation}, func() error {
			res.Counted += n
			res.Attempts[g.TileID] = g.Attempts
			res.Last = g.TileID // rows come in tile_id order, the database's
			if gaveUp {
				if gaveUpAt != nil {
					g.GaveUpAt = *gaveUpAt
				}
				res.GaveUp = append(res.GaveUp, g)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(res.GaveUp) == 0 {
			return nil
		}
		if beforeCommit != nil {
			if err := beforeCommit(ctx, res.GaveUp); err != nil {
				return fmt.Errorf("before commit (nothing was counted): %w", err)
			}
		}
		if _, err := tx.Exec(ctx, countDurable); err != nil {
			return fmt.Errorf("make the commit of %d give-ups wait for the disk: %w", len(res.GaveUp), err)
		}
		return nil
	})
	if err != nil {
		return CountResult{}, fmt.Errorf("count rejections of flight %s: %w", flightID, err)
	}
	return res, nil
}
