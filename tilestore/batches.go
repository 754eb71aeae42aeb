package tilestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrBatchMismatch is returned by OpenBatch when the operation ID is already
// recorded with different members: reusing a key for another body would
// make the provider answer IDEMPOTENCY_CONFLICT, or worse, replay the old
// answer for the new tiles.
var ErrBatchMismatch = errors.New("operation ID already recorded with different members")

// ErrBatchNotOpen is returned when a batch that is no longer open is failed
// or settled the other way.
var ErrBatchNotOpen = errors.New("upload batch is not open")

// ErrTilesInOpenBatch is returned by OpenBatch when a member is already in
// another open batch: sending a tile under two keys at once would upload it
// twice and count its rejections twice.
var ErrTilesInOpenBatch = errors.New("tile already in another open batch")

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

// OpenBatch records a batch before its first byte is sent. Recording the
// same op_id with the same flight, members and checksums again is a no-op
// (a crashed run's retry); with anything different it is ErrBatchMismatch.
// Members must be tiles of the flight and in no other open batch. The batch
// names this Store's run but has no lease, as batches journaled before
// leases existed: any run may adopt it (AdoptOpenBatches). Upload runs
// journal their batches with ClaimBatch instead; OpenBatch is for a batch
// whose members the caller chose (tests of recovery, tools).
func (s *Store) OpenBatch(ctx context.Context, b Batch) error {
	if err := validateBatch(b); err != nil {
		return fmt.Errorf("open batch %s: %w", b.OpID, err)
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Serialise batch opening per flight so the "in no other open
		// batch" check cannot race with a concurrent OpenBatch.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('tilectl/open_batch/' || $1))`, b.FlightID); err != nil {
			return err
		}
		var flight, fp string
		var ids, sums []string
		err := tx.QueryRow(ctx, `SELECT flight_id, fingerprint, tile_ids, sha256s FROM upload_batches WHERE op_id = $1`,
			b.OpID).Scan(&flight, &fp, &ids, &sums)
		if err == nil {
			if flight == b.FlightID && fp == b.Fingerprint && slices.Equal(ids, b.TileIDs) && slices.Equal(sums, b.SHA256s) {
				return nil
			}
			return ErrBatchMismatch
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var notOfFlight []string
		if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(u.id ORDER BY u.id), '{}') FROM unnest($1::text[]) AS u(id)
			WHERE NOT EXISTS (SELECT 1 FROM tiles t WHERE t.tile_id = u.id AND t.flight_id = $2)`,
			b.TileIDs, b.FlightID).Scan(&notOfFlight); err != nil {
			return err
		}
		if len(notOfFlight) > 0 {
			return fmt.Errorf("not tiles of flight %s: %w", b.FlightID, &UnknownTilesError{IDs: notOfFlight})
		}
		var other string
		var busy []string
		err = tx.QueryRow(ctx, `SELECT op_id, ARRAY(SELECT unnest(tile_ids) INTERSECT SELECT unnest($2::text[]))
			FROM upload_batches WHERE flight_id = $1 AND state = 'open' AND tile_ids && $2::text[] LIMIT 1`,
			b.FlightID, b.TileIDs).Scan(&other, &busy)
		if err == nil {
			sort.Strings(busy)
			return fmt.Errorf("%w %s: %s", ErrTilesInOpenBatch, other, strings.Join(clipIDs(busy), ", "))
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := s.insertBatch(ctx, tx, b, false); err != nil {
			return err
		}
		// A tile ClaimBatch put in a batch meanwhile has open_op_id set.
		tag, err := tx.Exec(ctx, `UPDATE tiles SET open_op_id = $1 WHERE tile_id = ANY($2) AND open_op_id IS NULL`, b.OpID, b.TileIDs)
		if err == nil && int(tag.RowsAffected()) != len(b.TileIDs) {
			return fmt.Errorf("%w claimed meanwhile", ErrTilesInOpenBatch)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("open batch %s: %w", b.OpID, err)
	}
	return nil
}

func clipIDs(ids []string) []string {
	if len(ids) > 5 {
		return append(ids[:5:5], fmt.Sprintf("and %d more", len(ids)-5))
	}
	return ids
}

// NoteSend counts one more send of the batch's request and renews its
// lease. It returns ErrNotOwner, and counts nothing, when another run has
// taken the batch over: this run must not send it then.
func (s *Store) NoteSend(ctx context.Context, opID string) error {
	// A count for people, not for safety: its commit need not wait for the
	// disk, which keeps a durable commit off every send's critical path.
	// The whole transaction is one pipelined round trip before every send.
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SET LOCAL synchronous_commit = off`)
	upd := b.Queue(`UPDATE upload_batches SET sends = sends + 1,
		lease_expires_at = greatest(lease_expires_at, now() + make_interval(secs => $3::float8))
		WHERE op_id = $1 AND owner_run IS NOT DISTINCT FROM $2`, opID, s.run.ID, s.leaseSecs())
	b.Queue(`COMMIT`)
	var rows int64
	upd.Exec(func(tag pgconn.CommandTag) error { rows = tag.RowsAffected(); return nil })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("note send of batch %s: %w", opID, err)
	}
	if rows == 0 {
		var owner *string
		err := s.pool.QueryRow(ctx, `SELECT owner_run FROM upload_batches WHERE op_id = $1`, opID).Scan(&owner)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("note send of batch %s: %w", opID, ErrBatchNotFound)
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
			coalesce(s.client_id, ''), coalesce(b.client_seq, 0)
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

// scanBatch reads a batch row: the journal's columns, then its client
// sequence ("" and 0 without one).
func scanBatch(r pgx.CollectableRow) (Batch, error) {
	var b Batch
	var seq int64
	err := r.Scan(&b.OpID, &b.FlightID, &b.Fingerprint, &b.TileIDs, &b.SHA256s, &b.Sends, &b.CreatedAt, &b.ClientID, &seq)
	b.ClientSeq = uint64(seq)
	return b, err
}

// FailBatch closes a batch that will never be answered (for example a key
// the provider no longer holds). Its tiles are free to join a new batch;
// their statuses do not change. Failing a failed batch is a no-op; failing
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
	_, err = tx.Exec(ctx, `UPDATE tiles SET open_op_id = NULL WHERE tile_id = ANY($1) AND open_op_id = $2`, members, opID)
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
