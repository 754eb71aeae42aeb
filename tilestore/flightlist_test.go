package tilestore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// The flight list reads the tiles only through the status index, which
// carries size_bytes: no plan that reads the tiles heap is needed (with
// sequential and bitmap scans off, the planner would still pick one if the
// index did not cover the query).
func TestLandSetsAnAirborneFlightOnGroundAndCallsBeforeCommitOnlyThen(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	if _, err := s.UpsertFlight(ctx, "F1", tilestore.FlightAirborne); err != nil {
		t.Fatal(err)
	}
	// A failing beforeCommit rolls the landing back.
	boom := errors.New("disk full")
	if _, err := s.Land(ctx, "F1", func(context.Context, tilestore.Landing) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Land with a failing beforeCommit: %v, want %v", err, boom)
	}
	if f, _ := s.Flight(ctx, "F1"); f.State != tilestore.FlightAirborne {
		t.Fatalf("state after a failed landing: %s, want airborne", f.State)
	}
	var calls []tilestore.Landing
	record := func(_ context.Context, l tilestore.Landing) error { calls = append(calls, l); return nil }
	l, err := s.Land(ctx, "F1", record)
	if err != nil || !l.Changed || l.PreviousState != tilestore.FlightAirborne || len(calls) != 1 || calls[0] != l {
		t.Fatalf("first landing: %+v, %v; beforeCommit saw %+v", l, err, calls)
	}
	f, _ := s.Flight(ctx, "F1")
	if f.State != tilestore.FlightOnGround || !f.UpdatedAt.Equal(l.LandedAt) {
		t.Fatalf("flight after landing: %+v, want on_ground updated at %v", f, l.LandedAt)
	}
	again, err := s.Land(ctx, "F1", record)
	if err != nil || again.Changed || again.PreviousState != tilestore.FlightOnGround || len(calls) != 1 {
		t.Fatalf("second landing: %+v, %v; beforeCommit calls %d, want 1", again, err, len(calls))
	}
	if _, err := s.Land(ctx, "nope", record); !errors.Is(err, tilestore.ErrFlightNotFound) {
		t.Fatalf("unknown flight: %v, want ErrFlightNotFound", err)
	}
}
