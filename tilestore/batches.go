package tilestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrBatchNotOpen is returned when a batch that is no longer open is failed
// or settled the other way.
var ErrBatchNotOpen = errors.New("upload batch is not open")

// NonMemberError says a settlement named tiles that are not members of the
// batch. Nothing was changed.
type NonMemberError struct {
	OpID string
	IDs  []string
}

func (e *NonMemberError) Error() string {
	return fmt.Sprintf("settlement of batch %s names %d tile(s) that are not its members: %s",
		e.OpID, len(e.IDs), (&UnknownTilesError{IDs: e.IDs}).Error()[len("unknown tile(s) "):])
}

func validateBatch(b Batch) error {
	if b.OpID == "" {
		return errors.New("operation ID is empty")
	}
	if err := ValidateFlightID(b.FlightID); err != nil {
		return err
	}
	if len(b.TileIDs) == 0 {
		return errors.New("batch has no tiles")
	}
	if len(b.TileIDs) != len(b.SHA256s) {
		return fmt.Errorf("batch has %d tile IDs but %d sha256s", len(b.TileIDs), len(b.SHA256s))
	}
	seen := make(map[string]bool, len(b.TileIDs))
	for _, id := range b.TileIDs {
		if seen[id] {
			return fmt.Errorf("tile %s is listed twice", id)
		}
		seen[id] = true
	}
	return validateTileIDs(b.TileIDs)
}

// NoteSend counts one more send of the batch's request and renews its
// lease. It counts nothing, and this run must not send the batch, when
// another run has taken the batch over (ErrNotOwner) or the batch is no
// longer open (ErrBatchNotOpen: settled or failed since the caller read
// it, by this run or another; its key must not run again).
func (s *Store) NoteSend(ctx context.Context, opID string) error {
	// A count for people, not for safety: its commit need not wait for the
	// disk, which keeps a durable commit off every send's critical path.
	// The whole transaction is one pipelined round trip before every send.
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SET LOCAL synchronous_commit = off`)
	upd := b.Queue(`UPDATE upload_batches SET sends = sends + 1,
		lease_expires_at = greatest(lease_expires_at, now() + make_interval(secs => $3::float8))
		WHERE op_id = $1 AND owner_run IS NOT DISTINCT FROM $2 AND state = 'open'`, opID, s.run.ID, s.leaseSecs())
	queueCommit(b)
	var rows int64
	upd.Exec(func(tag pgconn.CommandTag) error { rows = tag.RowsAffected(); return nil })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("note send of batch %s: %w", opID, err)
	}
	if rows == 0 {
		var state string
		err := s.pool.QueryRow(ctx, `SELECT state FROM upload_batches WHERE op_id = $1`, opID).Scan(&state)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("note send of batch %s: %w", opID, ErrBatchNotFound)
		case err != nil:
			return fmt.Errorf("note send of batch %s: read its state: %w", opID, err)
		case state != "open":
			return fmt.Errorf("note send of batch %s (%s): %w", opID, state, ErrBatchNotOpen)
		}
		return fmt.Errorf("note send of batch %s: %w", opID, ErrNotOwner)
	}
	return nil
}

// OpenBatches lists the flight's batches that were recorded but never
// settled or failed, oldest first: the ones a new run must settle before it
// forms new batches.
func (s *Store) OpenBatches(ctx context.Context, flightID string) ([]Batch, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT op_id, flight_id, fingerprint, tile_ids, sha256s, sends, created_at,
			coalesce(s.client_id, ''), coalesce(b.client_seq, 0), `+notBeforeCols+`
		FROM upload_batches b LEFT JOIN upload_client_sequences s ON s.id = b.client_stream
		WHERE flight_id = $1 AND state = 'open' ORDER BY created_at, op_id`, flightID)
	if err != nil {
		return nil, fmt.Errorf("open batches of flight %s: %w", flightID, err)
	}
	bs, err := pgx.CollectRows(rows, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("open batches of flight %s: %w", flightID, err)
	}
	return bs, nil
}

// notBeforeCols are a batch row's not-before and the seconds left until it
// by the database's clock (both NULL without one), for scanBatch.
const notBeforeCols = `not_before, greatest(extract(epoch FROM not_before - now()), 0)::float8`

// scanBatch reads a batch row: the journal's columns, its client sequence
// ("" and 0 without one), then notBeforeCols.
func scanBatch(r pgx.CollectableRow) (Batch, error) {
	var b Batch
	var seq int64
	var left *float64
	err := r.Scan(&b.OpID, &b.FlightID, &b.Fingerprint, &b.TileIDs, &b.SHA256s, &b.Sends, &b.CreatedAt, &b.ClientID, &seq,
		&b.NotBefore, &left)
	b.ClientSeq = uint64(seq)
	if left != nil {
		b.NotBeforeIn = time.Duration(*left * float64(time.Second))
	}
	return b, err
}

// DeferBatch journals a provider's advice that batch opID not be sent
// again for wait: its not-before becomes now + wait by the database's
// clock, so every run on every host reads the same time, and a later
// not-before already journaled is kept. Only an open batch is deferred.
// It returns the batch's not-before; ErrBatchNotOpen when it is not open.
func (s *Store) DeferBatch(ctx context.Context, opID string, wait time.Duration) (time.Time, error) {
	var nb time.Time
	err := s.pool.QueryRow(ctx, `UPDATE upload_batches
		SET not_before = greatest(not_before, now() + make_interval(secs => $2::float8))
		WHERE op_id = $1 AND state = 'open' RETURNING not_before`, opID, max(wait, 0).Seconds()).Scan(&nb)
	if errors.Is(err, pgx.ErrNoRows) {
		return nb, fmt.Errorf("defer batch %s: %w", opID, ErrBatchNotOpen)
	}
	if err != nil {
		return nb, fmt.Errorf("defer batch %s: %w", opID, err)
	}
	return nb, nil
}

// FailBatch closes a batch that will never be answered (for example a key
// the provider no longer holds). Its tiles leave it, their statuses
// unchanged, and wait for a lookup before any claim takes them again (see
// Claim.LookedUp). Failing a failed batch is a no-op; failing
// a settled one is ErrBatchNotOpen.
func (s *Store) FailBatch(ctx context.Context, opID string, httpStatus int, detail string) error {
	// state = 'open' in the UPDATE (not in a snapshot read before it) makes a
	// concurrent SettleBatch win cleanly: Postgres rechecks it after the lock.
	var failed bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		failed, err = failOpenBatch(ctx, tx, opID, httpStatus, detail)
		return err
	})
	if err != nil {
		return fmt.Errorf("fail batch %s: %w", opID, err)
	}
	if failed {
		return nil
	}
	var state string
	err = s.pool.QueryRow(ctx, `SELECT state FROM upload_batches WHERE op_id = $1`, opID).Scan(&state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("fail batch %s: %w", opID, ErrBatchNotFound)
	case err != nil:
		return fmt.Errorf("fail batch %s: %w", opID, err)
	case state == "settled":
		return fmt.Errorf("fail batch %s: it is already settled: %w", opID, ErrBatchNotOpen)
	}
	return nil
}

// failOpenBatch fails opID if it is open and frees its tiles; failed is
// false when it was not open (or does not exist).
func failOpenBatch(ctx context.Context, tx pgx.Tx, opID string, httpStatus int, detail string) (failed bool, err error) {
	var members []string
	err = tx.QueryRow(ctx, `UPDATE upload_batches
		SET state = 'failed', settled_at = now(), http_status = nullif($2::int, 0), detail = nullif($3, '')
		WHERE op_id = $1 AND state = 'open' RETURNING tile_ids`, opID, httpStatus, detail).Scan(&members)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, err = tx.Exec(ctx, freeTilesSQL, members, opID)
	return err == nil, err
}

// SyncJournal makes every earlier journal write durable. SettleBatch and
// NoteSend commit without waiting for the disk; a synchronous commit that
// writes something flushes the WAL in order, theirs included. (A commit
// that writes nothing flushes nothing, hence the update.) The uploader
// calls it at the end of every run, so a run that reports tiles uploaded
// has made that durable.
func (s *Store) SyncJournal(ctx context.Context, flightID string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE flights SET updated_at = now() WHERE flight_id = $1`, flightID)
		return err
	})
	if err != nil {
		return fmt.Errorf("sync upload journal of flight %s: %w", flightID, err)
	}
	return nil
}
