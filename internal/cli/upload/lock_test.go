package upload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
)

func TestLosingTheLockSessionIsNoticedAndReported(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock, err := lockFlight(ctx, cfg, "FL", "pid 7 on host lost-lock-test")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.release()
	lostCh := make(chan error, 1)
	stop := lock.watch(20*time.Millisecond, func(err error) { lostCh <- err })
	defer stop()

	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name LIKE '%lost-lock-test%'`); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lostCh:
		if err == nil {
			t.Fatal("lost called with a nil error")
		}
		lle := &LockLostError{FlightID: "FL", Err: err}
		if !errors.Is(lle, err) {
			t.Error("LockLostError does not unwrap to the session error")
		}
	case <-ctx.Done():
		t.Fatal("the terminated lock session was never noticed")
	}
	// The lock is free again: another run can take it, which is why this
	// run had to stop.
	other, err := lockFlight(ctx, cfg, "FL", "pid 8 on host test")
	if err != nil {
		t.Fatalf("after the session ended the lock should be free: %v", err)
	}
	other.release()
}

func TestAHealthyLockSessionIsNotReportedLost(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := lockFlight(context.Background(), cfg, "FH", "pid 9 on host test")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.release()
	lost := make(chan error, 1)
	stop := lock.watch(5*time.Millisecond, func(err error) { lost <- err })
	// Let several checks run: they are driven by the ticker, and the
	// assertion is only that none of them reports a loss.
	deadline := time.After(200 * time.Millisecond)
	select {
	case err := <-lost:
		t.Fatalf("healthy lock reported lost: %v", err)
	case <-deadline:
	}
	stop()
}
