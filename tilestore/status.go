package tilestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FlightCounts returns, per flight, how many tiles are in each status
// (every status present, zero when none), ordered by flight ID. flightID ""
// means every flight; an unknown flight is ErrFlightNotFound.
func (s *Store) FlightCounts(ctx context.Context, flightID string) ([]FlightCounts, error) {
	if flightID != "" {
		if err := ValidateFlightID(flightID); err != nil {
			return nil, err
		}
	}
	rows, err := s.pool.Query(ctx, `
SELECT f.flight_id, f.state, t.voting_status, count(t.tile_id)
  FROM flights f LEFT JOIN tiles t ON t.flight_id = f.flight_id
 WHERE $1 = '' OR f.flight_id = $1
 GROUP BY f.flight_id, f.state, t.voting_status
 ORDER BY f.flight_id`, flightID)
	if err != nil {
		return nil, fmt.Errorf("count tiles of flight %q: %w", flightID, err)
	}
	var out []FlightCounts
	var id, state string
	var status *string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &status, &n}, func() error {
		if len(out) == 0 || out[len(out)-1].FlightID != id {
			out = append(out, FlightCounts{FlightID: id, State: FlightState(state), ByStatus: zeroCounts()})
		}
		if status != nil {
			out[len(out)-1].ByStatus[VotingStatus(*status)] = n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count tiles of flight %q: %w", flightID, err)
	}
	if flightID != "" && len(out) == 0 {
		return nil, fmt.Errorf("count tiles of flight %s: %w", flightID, ErrFlightNotFound)
	}
	return out, nil
}

// GiveUpCount counts the flight's tiles in upload_giveup, through the
// give-ups' partial index: what a run reports as awaiting review, at the
// cost of the give-ups, not of the flight (FlightCounts reads every tile).
func (s *Store) GiveUpCount(ctx context.Context, flightID string) (int64, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tiles WHERE flight_id = $1 AND voting_status = 'upload_giveup'`,
		flightID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the given-up tiles of flight %s: %w", flightID, err)
	}
	return n, nil
}

// GiveUps lists tiles that ran out of upload attempts, newest first (then by
// tile ID), at most limit of them (limit <= 0: all). flightID "" means every
// flight.
func (s *Store) GiveUps(ctx context.Context, flightID string, limit int) ([]GiveUp, error) {
	if flightID != "" {
		if err := ValidateFlightID(flightID); err != nil {
			return nil, err
		}
	}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(ctx, `
SELECT tile_id, flight_id, upload_attempts, coalesce(last_rejection_reason, ''),
       coalesce(last_rejection_message, ''), gave_up_at
  FROM tiles
 WHERE voting_status = 'upload_giveup' AND ($1 = '' OR flight_id = $1)
 ORDER BY gave_up_at DESC NULLS LAST, tile_id
 LIMIT $2`, flightID, lim)
	if err != nil {
		return nil, fmt.Errorf("list give-ups of flight %q: %w", flightID, err)
	}
	gs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (GiveUp, error) {
		var g GiveUp
		var at *time.Time
		err := r.Scan(&g.TileID, &g.FlightID, &g.Attempts, &g.LastReason, &g.LastMessage, &at)
		if at != nil {
			g.GaveUpAt = *at
		}
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("list give-ups of flight %q: %w", flightID, err)
	}
	return gs, nil
}

// ZoomCounts is how far one zoom level of a flight is: its tiles, those
// uploaded, those still to send (pending or trusted) and those given up.
type ZoomCounts struct {
	Z        int
	Total    int64
	Uploaded int64
	Pending  int64
	GivenUp  int64
}

// ZoomProgress counts a flight's tiles per zoom level, lowest first, in
// one statement over the flight's tiles. An unknown or empty flight has
// no levels.
func (s *Store) ZoomProgress(ctx context.Context, flightID string) ([]ZoomCounts, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
SELECT z, count(*),
       count(*) FILTER (WHERE voting_status = 'uploaded'),
       count(*) FILTER (WHERE voting_status IN ('pending', 'trusted')),
       count(*) FILTER (WHERE voting_status = 'upload_giveup')
  FROM tiles WHERE flight_id = $1
 GROUP BY z ORDER BY z`, flightID)
	if err != nil {
		return nil, fmt.Errorf("count the tiles of flight %s per zoom level: %w", flightID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ZoomCounts, error) {
		var c ZoomCounts
		var z int16
		err := r.Scan(&z, &c.Total, &c.Uploaded, &c.Pending, &c.GivenUp)
		c.Z = int(z)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count the tiles of flight %s per zoom level: %w", flightID, err)
	}
	return out, nil
}
