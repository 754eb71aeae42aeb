package tilestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Landing is a flight's move to on_ground by Land.
type Landing struct {
	FlightID string
	// Changed is false when the flight was already on_ground: Land then
	// changed nothing and did not call beforeCommit.
	Changed bool
	// PreviousState is the state the flight had. RowVersion is the
	// flight row's updated_at before the landing (when its state, or a
	// run's journal sync, last changed it): with the flight ID it names the
	// landing, for a record written before the commit to be found again.
	PreviousState FlightState
	RowVersion    time.Time
	// LandedAt is the database's time of the change (Changed), the new
	// flights.updated_at.
	LandedAt time.Time
}

// Land sets the flight on_ground. A flight already on_ground is left as it
// is (Landing.Changed false); an unknown one is ErrFlightNotFound.
// beforeCommit (if not nil) runs in the transaction that holds the
// flight's row, before commit, only when the state changes; its error rolls
// the change back. The row lock is FOR NO KEY UPDATE: an import inserting
// the flight's tiles (a foreign key check, FOR KEY SHARE) does not wait
// for it.
func (s *Store) Land(ctx context.Context, flightID string, beforeCommit func(ctx context.Context, l Landing) error) (Landing, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return Landing{}, err
	}
	var l Landing
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		l = Landing{FlightID: flightID}
		var state string
		err := tx.QueryRow(ctx, `SELECT state, updated_at, now() FROM flights WHERE flight_id = $1 FOR NO KEY UPDATE`,
			flightID).Scan(&state, &l.RowVersion, &l.LandedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("flight %s: %w", flightID, ErrFlightNotFound)
		}
		if err != nil {
			return err
		}
		l.PreviousState = FlightState(state)
		if l.PreviousState == FlightOnGround {
			return nil
		}
		l.Changed = true
		if beforeCommit != nil {
			if err := beforeCommit(ctx, l); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `UPDATE flights SET state = 'on_ground', updated_at = now() WHERE flight_id = $1`, flightID)
		return err
	})
	if err != nil {
		return Landing{}, fmt.Errorf("land flight %s: %w", flightID, err)
	}
	return l, nil
}
