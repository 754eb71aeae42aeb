package tilestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FlightHold is what a flight still has in flight: tiles waiting to be sent
// and open batches. DeleteFlight refuses a flight with any (unless forced).
type FlightHold struct {
	FlightID    string
	Tiles       int64 // every tile of the flight
	Waiting     int64 // pending or trusted
	OpenBatches int64
	OpenTiles   int64 // members of open batches
	// LiveLeases counts open batches whose lease has not ended by the
	// database's clock: a run (of any host) is working on them.
	LiveLeases int64
	// UnfinishedRuns are the flight's upload runs that started and
	// recorded no end: running now, or killed.
	UnfinishedRuns []UploadRun
	RowVersion     time.Time // flights.updated_at, for the record's key
}

// Busy reports whether the flight has tiles to send or open batches.
func (h FlightHold) Busy() bool { return h.Waiting > 0 || h.OpenBatches > 0 }

const flightHoldSQL = `
SELECT f.updated_at,
       (SELECT count(*) FROM tiles t WHERE t.flight_id = f.flight_id),
       (SELECT count(*) FROM tiles t WHERE t.flight_id = f.flight_id AND t.voting_status IN ('pending', 'trusted')),
       (SELECT count(*) FROM upload_batches b WHERE b.flight_id = f.flight_id AND b.state = 'open'),
       (SELECT coalesce(sum(cardinality(b.tile_ids)), 0) FROM upload_batches b WHERE b.flight_id = f.flight_id AND b.state = 'open'),
       (SELECT count(*) FROM upload_batches b WHERE b.flight_id = f.flight_id AND b.state = 'open'
                                               AND b.lease_expires_at > now())
  FROM flights f WHERE f.flight_id = $1`

func flightHold(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, flightID string) (FlightHold, error) {
	h := FlightHold{FlightID: flightID}
	err := q.QueryRow(ctx, flightHoldSQL, flightID).Scan(&h.RowVersion, &h.Tiles, &h.Waiting, &h.OpenBatches, &h.OpenTiles, &h.LiveLeases)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, fmt.Errorf("flight %s: %w", flightID, ErrFlightNotFound)
	}
	if err != nil {
		return h, err
	}
	rows, err := q.Query(ctx, `SELECT run_id, host, pid, started_at FROM upload_runs
		WHERE flight_id = $1 AND finished_at IS NULL ORDER BY started_at`, flightID)
	if err != nil {
		return h, err
	}
	h.UnfinishedRuns, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (UploadRun, error) {
		u := UploadRun{FlightID: flightID}
		return u, r.Scan(&u.RunID, &u.Host, &u.PID, &u.StartedAt)
	})
	return h, err
}

// Hold reads what the flight still has in flight (ErrFlightNotFound for an
// unknown flight).
func (s *Store) Hold(ctx context.Context, flightID string) (FlightHold, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return FlightHold{}, err
	}
	h, err := flightHold(ctx, s.pool, flightID)
	if err != nil {
		return h, fmt.Errorf("look at flight %s: %w", flightID, err)
	}
	return h, nil
}

// FlightBusyError is DeleteFlight's refusal of a flight that still has
// tiles to send or open batches, found under the flight's lock.
type FlightBusyError struct{ Hold FlightHold }

func (e *FlightBusyError) Error() string {
	return fmt.Sprintf("flight %s has %d tiles waiting to be sent and %d open batches (%d tiles)",
		e.Hold.FlightID, e.Hold.Waiting, e.Hold.OpenBatches, e.Hold.OpenTiles)
}

// DeletedFlight is what DeleteFlight removed from the database.
type DeletedFlight struct {
	Hold       FlightHold // as found under the flight's lock
	Tiles      int64
	Batches    int64
	Rejections int64
	Runs       int64
	BlobPaths  []string // every blob path its tiles named
}

// DeleteFlight removes a flight and every row that names it (tiles, upload
// batches, rejections, run history) in one transaction. It first locks the
// flight's row FOR UPDATE, which an import inserting tiles and a claim
// journaling a batch (both check the flight's key) wait for, then reads the
// flight's hold under that lock: with tiles waiting or open batches it
// refuses (*FlightBusyError) unless force. beforeCommit (if not nil) runs
// with the rows still locked and deleted but not committed, given what is
// being deleted: it writes the record and removes the blobs; its error
// rolls everything back.
func (s *Store) DeleteFlight(ctx context.Context, flightID string, force bool,
	beforeCommit func(ctx context.Context, d DeletedFlight) error) (DeletedFlight, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return DeletedFlight{}, err
	}
	var d DeletedFlight
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		d = DeletedFlight{}
		var id string
		err := tx.QueryRow(ctx, `SELECT flight_id FROM flights WHERE flight_id = $1 FOR UPDATE`, flightID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("flight %s: %w", flightID, ErrFlightNotFound)
		}
		if err != nil {
			return err
		}
		if d.Hold, err = flightHold(ctx, tx, flightID); err != nil {
			return err
		}
		if d.Hold.Busy() && !force {
			return &FlightBusyError{Hold: d.Hold}
		}
		rows, err := tx.Query(ctx, `SELECT DISTINCT blob_path FROM tiles WHERE flight_id = $1`, flightID)
		if err != nil {
			return err
		}
		if d.BlobPaths, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `
WITH r AS (DELETE FROM upload_rejections x USING tiles t WHERE t.tile_id = x.tile_id AND t.flight_id = $1 RETURNING 1),
     b AS (DELETE FROM upload_batches WHERE flight_id = $1 RETURNING 1),
     u AS (DELETE FROM upload_runs WHERE flight_id = $1 RETURNING 1)
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM b), (SELECT count(*) FROM u)`, flightID).
			Scan(&d.Rejections, &d.Batches, &d.Runs)
		if err != nil {
			return fmt.Errorf("delete the journal and run history: %w", err)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM tiles WHERE flight_id = $1`, flightID)
		if err != nil {
			return fmt.Errorf("delete the tiles: %w", err)
		}
		d.Tiles = tag.RowsAffected()
		if _, err := tx.Exec(ctx, `DELETE FROM flights WHERE flight_id = $1`, flightID); err != nil {
			return fmt.Errorf("delete the flight row: %w", err)
		}
		if beforeCommit != nil {
			return beforeCommit(ctx, d)
		}
		return nil
	})
	if err != nil {
		return d, fmt.Errorf("delete flight %s: %w", flightID, err)
	}
	return d, nil
}
