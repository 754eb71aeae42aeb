package upload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/tilestore"
)

// The flights a run's end kept from starting share one budget for counting
// what they leave: a database that does not answer delays the exit by that
// budget once, not once per flight. A flight whose count the budget cut
// has its pending tiles unknown (null), not a number.
func TestFlightsTheRunsEndKeptFromStartingShareOneCountBudget(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "un0")
	ctx := context.Background()
	ids := []string{"un0", "un1", "un2", "un3", "un4"}
	for _, id := range ids {
		if _, err := c.Store.UpsertFlight(ctx, id, tilestore.FlightOnGround); err != nil {
			t.Fatal(err)
		}
		c.AddTiles(t, id, 2, 64, 7)
	}
	// The database stops answering about tiles: every count waits.
	tx, err := c.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE tiles IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	const budget = time.Second
	r := &run{store: c.Store, opts: &Options{Clock: retrydecorator.SystemClock{}}, log: zerolog.Nop(), unstartedBudget: budget}
	ended, cancel := context.WithCancel(ctx)
	cancel() // the run's end came before these flights
	start := time.Now()
	var sums []FlightSummary
	for _, id := range ids {
		fs, err := r.unstarted(ended, id)
		if err == nil {
			t.Errorf("flight %s: no error, want it not started with its pending tiles unknown", id)
		}
		sums = append(sums, fs)
	}
	took := time.Since(start)
	// The budget once, and room for a loaded machine; not once per flight.
	if limit := budget + budget*3/2; took > limit {
		t.Errorf("counting %d unstarted flights took %s, want at most about the one budget of %s (< %s)", len(ids), took, budget, limit)
	}
	for _, fs := range sums {
		if fs.StillPending != nil || fs.StillPendingBytes != nil {
			t.Errorf("flight %s: still pending %s, want unknown (nil): its count did not answer within the budget",
				fs.FlightID, fmtPtr(fs.StillPending))
		}
	}
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
