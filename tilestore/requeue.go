package tilestore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Requeued is one given-up tile moved back to pending by a person.
type Requeued struct {
	TileID           string
	FlightID         string
	PreviousAttempts int // upload_attempts at the requeue: they stay, the budget counts from here
	Requeues         int // how many times this tile has now been requeued
	RequeuedAt       time.Time
}

// NotGivenUpError names tiles a requeue refused: unknown, of another
// flight, or not in upload_giveup. Nothing was changed.
type NotGivenUpError struct {
	FlightID string
	IDs      []string
	Statuses []string // status of each, "unknown" when not a tile of the flight
}

func (e *NotGivenUpError) Error() string {
	parts := make([]string, len(e.IDs))
	for i, id := range e.IDs {
		parts[i] = id + " (" + e.Statuses[i] + ")"
	}
	return fmt.Sprintf("only given-up tiles can be requeued; not given up in flight %s: %s; nothing was changed",
		e.FlightID, strings.Join(parts, ", "))
}

// Requeue moves given-up tiles of a flight back to pending with a fresh
// per-tile budget: upload_attempts keeps every attempt spent, budget_base
// is set to it, so the tile may be rejected max_per_tile_attempts more
// times. ids names the tiles; all (with ids empty) takes every given-up
// tile of the flight. If any named tile is not given up, nothing changes
// and the error is a *NotGivenUpError. beforeCommit (if not nil) runs in
// the transaction with the tiles, before commit; its error rolls back.
func (s *Store) Requeue(ctx context.Context, flightID string, ids []string, all bool,
	beforeCommit func(ctx context.Context, rs []Requeued) error) ([]Requeued, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	if len(ids) > 0 {
		if err := validateTileIDs(ids); err != nil {
			return nil, err
		}
	}
	var out []Requeued
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, `SELECT tile_id, voting_status || CASE WHEN blob_pruned_at IS NOT NULL
				THEN ', its cached blob pruned at ' || to_char(blob_pruned_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') ||
				': the provider holds it and its bytes are gone from this station' ELSE '' END FROM tiles
			WHERE flight_id = $1 AND (tile_id = ANY($2) OR ($3 AND voting_status = 'upload_giveup'))
			ORDER BY tile_id FOR UPDATE`, flightID, ids, all)
		if err != nil {
			return err
		}
		status := map[string]string{}
		var id, st string
		if _, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error { status[id] = st; return nil }); err != nil {
			return err
		}
		bad := &NotGivenUpError{FlightID: flightID}
		for _, id := range ids {
			switch st, ok := status[id]; {
			case !ok:
				bad.IDs, bad.Statuses = append(bad.IDs, id), append(bad.Statuses, "unknown")
			case st != string(StatusUploadGiveup):
				bad.IDs, bad.Statuses = append(bad.IDs, id), append(bad.Statuses, st)
			}
		}
		if len(bad.IDs) > 0 {
			return bad
		}
		var take []string
		for id, st := range status {
			if st == string(StatusUploadGiveup) {
				take = append(take, id)
			}
		}
		slices.Sort(take)
		out, err = requeueRows(ctx, tx, beforeCommit, `UPDATE tiles SET `+requeueSet+`
			WHERE tile_id = ANY($1) RETURNING `+requeueReturning, take)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("requeue tiles of flight %s: %w", flightID, err)
	}
	return out, nil
}

// What a requeue does to a tile: pending again, with its attempts so far
// kept and its budget counted from here (budget_base), one more requeue
// recorded. requeueReturning is what requeueRows reads back.
const (
	requeueSet       = `voting_status = 'pending', budget_base = upload_attempts, requeues = requeues + 1, requeued_at = now()`
	requeueReturning = `tile_id, flight_id, upload_attempts, requeues, requeued_at`
)

// requeueRows runs update (an UPDATE ... SET requeueSet ... RETURNING
// requeueReturning) in tx and hands the moved tiles, in tile_id order, to
// beforeCommit (if not nil and any moved), whose error rolls back.
func requeueRows(ctx context.Context, tx pgx.Tx, beforeCommit func(ctx context.Context, rs []Requeued) error,
	update string, args ...any) ([]Requeued, error) {
	rows, err := tx.Query(ctx, update, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Requeued, error) {
		var q Requeued
		err := r.Scan(&q.TileID, &q.FlightID, &q.PreviousAttempts, &q.Requeues, &q.RequeuedAt)
		return q, err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Requeued) int { return strings.Compare(a.TileID, b.TileID) })
	if len(out) > 0 && beforeCommit != nil {
		if err := beforeCommit(ctx, out); err != nil {
			return nil, fmt.Errorf("before commit (nothing was requeued): %w", err)
		}
	}
	return out, nil
}
