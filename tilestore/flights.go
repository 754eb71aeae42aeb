package tilestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// UpsertFlight inserts the flight, or sets the state of an existing one.
func (s *Store) UpsertFlight(ctx context.Context, id string, state FlightState) (Flight, error) {
	if err := ValidateFlightID(id); err != nil {
		return Flight{}, err
	}
	if state != FlightAirborne && state != FlightOnGround {
		return Flight{}, fmt.Errorf("upsert flight %s: state %q is not %q or %q", id, state, FlightAirborne, FlightOnGround)
	}
	// updated_at moves only when the state really changes.
	const q = `
INSERT INTO flights (flight_id, state) VALUES ($1, $2)
ON CONFLICT (flight_id) DO UPDATE
   SET state = EXCLUDED.state,
       updated_at = CASE WHEN flights.state = EXCLUDED.state THEN flights.updated_at ELSE now() END
RETURNING flight_id, state, created_at, updated_at`
	f, err := scanFlight(s.pool.QueryRow(ctx, q, id, string(state)))
	if err != nil {
		return Flight{}, fmt.Errorf("upsert flight %s: %w", id, err)
	}
	return f, nil
}

// Flight returns one flight, or an error matching ErrFlightNotFound.
func (s *Store) Flight(ctx context.Context, id string) (Flight, error) {
	if err := ValidateFlightID(id); err != nil {
		return Flight{}, err
	}
	const q = `SELECT flight_id, state, created_at, updated_at FROM flights WHERE flight_id = $1`
	f, err := scanFlight(s.pool.QueryRow(ctx, q, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Flight{}, fmt.Errorf("flight %s: %w", id, ErrFlightNotFound)
	}
	if err != nil {
		return Flight{}, fmt.Errorf("read flight %s: %w", id, err)
	}
	return f, nil
}

func scanFlight(row pgx.Row) (Flight, error) {
	var f Flight
	var state string
	if err := row.Scan(&f.ID, &state, &f.CreatedAt, &f.UpdatedAt); err != nil {
		return Flight{}, err
	}
	f.State = FlightState(state)
	return f, nil
}
