package retrydecorator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/fdr/fdrtest"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// idleInTransaction counts this database's sessions that sit idle inside
// a transaction.
func idleInTransaction(t *testing.T, st *tilestore.Store) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestARunKeepsItsDeadlineAndHoldsNoRowLocksWhileAnotherProcessHoldsTheFDRLock(t *testing.T) {
	const fl = "FL"
	st, ids := pgStore(t, fl, 2)
	bad := ids[0]
	ring, path := openRing(t, 0)
	// bad is at its budget's last attempt with one rejection uncounted:
	// the run's first count gives it up and must write its record.
	ctx := context.Background()
	if _, err := st.Pool().Exec(ctx, `UPDATE tiles SET upload_attempts = 1 WHERE tile_id = $1`, bad); err != nil {
		t.Fatal(err)
	}
	providertest.RejectUnsent(t, ctx, st, fl, "op-old", bad, "invalid_tile", "bad")
	cfg := defaultConfig()
	cfg.MaxPerTileAttempts = 2
	u := New(idleInner(fl), st, ring, zerolog.Nop(), &fakeClock{now: t0}, cfg, Hooks{})
	release := fdrtest.HoldLock(t, path)

	const deadline = 500 * time.Millisecond
	rctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		_, err := u.UploadPendingTiles(rctx, uploader.Request{FlightID: fl})
		done <- result{err, time.Since(start)}
	}()
	idle := 0
	var res result
wait:
	for {
		select {
		case res = <-done:
			break wait
		case <-time.After(10 * time.Millisecond):
			idle = max(idle, idleInTransaction(t, st))
			if time.Since(start) > 10*time.Second {
				release() // let the blocked run finish
				res = <-done
				t.Fatalf("run still waiting for the FDR lock %s after its %s deadline", time.Since(start), deadline)
			}
		}
	}
	if idle > 0 {
		t.Errorf("%d session(s) sat idle in transaction while the run waited for the FDR lock", idle)
	}
	if !errors.Is(res.err, context.DeadlineExceeded) {
		t.Errorf("run error %v, want the deadline", res.err)
	}
	if res.took > deadline+2*time.Second {
		t.Errorf("run with a %s deadline ended after %s", deadline, res.took)
	}
	if s, n := statusOf(t, st, bad), attemptsOf(t, st, bad); s != "pending" || n != 1 {
		t.Errorf("tile %s is %s with %d attempts, want pending with 1: nothing counted without its record", bad, s, n)
	}

	// Once the other process lets go, the next run counts and records it.
	release()
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl})
	if err != nil || rep.GivenUp != 1 || statusOf(t, st, bad) != "upload_giveup" {
		t.Fatalf("run after the lock was released: given_up %d, %v; want the give-up", rep.GivenUp, err)
	}
}

func TestAGiveUpReachedAgainAfterACrashAndOneMoreRejectionHasOneRecord(t *testing.T) {
	const fl = "FK"
	st, ids := pgStore(t, fl, 2)
	bad := ids[0]
	inner, _ := storeInner(st, fl, func(_ int, id string) bool { return id == bad })
	cfg := defaultConfig()
	cfg.MaxInCallRetries, cfg.MaxPerTileAttempts = 0, 2
	rec := newTestRecorder(t)
	u := New(inner, st, rec, zerolog.Nop(), &fakeClock{now: t0}, cfg, Hooks{})
	ctx := context.Background()

	// Run 1: one rejection, attempts 1 of 2.
	if _, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl}); err != nil {
		t.Fatal(err)
	}
	// Run 2: the second rejection reaches the budget; the database goes
	// away after the FDR record is on disk and before the commit.
	rec.afterAppend = func() { terminateBackends(t, st) }
	if _, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl}); err == nil {
		t.Fatal("run 2: want an error from the interrupted commit")
	}
	rec.afterAppend = nil
	if got := rec.count(t, GiveUpKind); got != 1 {
		t.Fatalf("after run 2: %d give-up records, want 1", got)
	}
	// A run that counts nothing (--no-retry) records one more rejection
	// of the tile: it now has two uncounted, and the next count gives it
	// up at 3 attempts instead of 2.
	providertest.RejectUnsent(t, ctx, st, fl, "op-no-retry", bad, "invalid_tile", "bad again")
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl})
	if err != nil {
		t.Fatal(err)
	}
	if s, n := statusOf(t, st, bad), attemptsOf(t, st, bad); s != "upload_giveup" || n != 3 || rep.GivenUp != 1 {
		t.Fatalf("after run 3: %s with %d attempts, given_up %d; want upload_giveup with 3, given up once", s, n, rep.GivenUp)
	}
	if got := rec.count(t, GiveUpKind); got != 1 {
		t.Errorf("%d give-up records for one give-up, want 1", got)
	}
}
