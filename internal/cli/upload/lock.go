package upload

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
)

// FlightBusyError says another run holds a flight's upload lock.
// errors.Is(err, exitcode.ErrFlightBusy) holds, so it exits 5.
type FlightBusyError struct {
	FlightID string
	Holder   string // the other run's "pid N on host H", or "" when unknown
}

func (e *FlightBusyError) Error() string {
	msg := fmt.Sprintf("flight %s is being uploaded by another run", e.FlightID)
	if e.Holder != "" {
		msg += " (" + e.Holder + ")"
	}
	return msg + "; wait for it to finish, or stop it, then run upload-pending again"
}

func (e *FlightBusyError) Is(target error) bool { return target == exitcode.ErrFlightBusy }

// lockKey derives the flight's advisory lock key. The prefix keeps it apart
// from other advisory locks on the same database.
func lockKey(flightID string) int64 {
	h := sha256.Sum256([]byte("tilectl/upload-pending/" + flightID))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// flightLock is a session advisory lock held on its own connection for the
// whole run, so the pool's connections never carry it by accident and the
// lock ends with the process if it dies (the session closes).
type flightLock struct {
	conn *pgx.Conn
	key  int64
}

// holderSQL finds who holds a bigint advisory lock: Postgres splits the key
// into classid (high 32 bits) and objid (low 32 bits), objsubid 1.
const holderSQL = `SELECT coalesce(a.application_name, '') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.classid = (($1::bigint >> 32) & 4294967295)::oid AND l.objid = ($1::bigint & 4294967295)::oid
 LIMIT 1`

// lockFlight takes the flight's lock without waiting. holder ("pid N on
// host H") is published as the session's application_name so a second run
// can say who holds the flight.
func lockFlight(ctx context.Context, cfg *pgx.ConnConfig, flightID, holder string) (*flightLock, error) {
	cc := cfg.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = truncate("tilectl upload-pending "+holder, 63)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect for the upload lock of flight %s: %w", flightID, err)
	}
	key := lockKey(flightID)
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("take the upload lock of flight %s: %w", flightID, err)
	}
	if !got {
		var name string
		// Best effort: the holder may have finished in between.
		_ = conn.QueryRow(ctx, holderSQL, key).Scan(&name)
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, &FlightBusyError{FlightID: flightID, Holder: strings.TrimPrefix(name, "tilectl upload-pending ")}
	}
	return &flightLock{conn: conn, key: key}, nil
}

// release unlocks and closes the connection. Closing alone would release
// the lock too; the explicit unlock makes the intent plain in server logs.
func (l *flightLock) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, l.key)
	_ = l.conn.Close(ctx)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// LockLostError says the run lost its flight lock mid-run (its database
// session ended), so another run may have started: this one stops forming
// batches. What it sent is journaled and safe; run upload-pending again.
type LockLostError struct {
	FlightID string
	Err      error
}

func (e *LockLostError) Error() string {
	return fmt.Sprintf("lost the upload lock of flight %s (%v): stopped so that only one run uploads it; "+
		"nothing sent is lost, run upload-pending again", e.FlightID, e.Err)
}

func (e *LockLostError) Unwrap() error { return e.Err }

// watch checks every interval that the lock's session is alive and calls
// lost once if it is not. The returned stop ends the watch and must be
// called before release (the connection is not safe for concurrent use).
func (l *flightLock) watch(interval time.Duration, lost func(error)) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), interval)
				err := l.conn.Ping(ctx)
				cancel()
				if err != nil {
					lost(err)
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
