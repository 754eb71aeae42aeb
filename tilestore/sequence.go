package tilestore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// Strict client sequencing (docs/provider-api.md "Strict client
// sequencing (optional)", migration 0010). A stream is one client ID at one provider;
// its row holds the last sequence number the client knows committed. A
// claim with Claim.Stream binds the stream's next number (last + 1) to the
// batch it journals, under the stream row's lock, so the number is durable
// before the batch's first byte; only one batch of a stream is open at a
// time, across every process sharing the database (a partial unique index
// makes it structural). A 2xx settlement commits the number; a failed batch
// consumes none, so the next claim binds the same number again.

// Stream is one client's sequence at one provider, as the client knows it.
type Stream struct {
	ID            int64
	Provider      string
	ClientID      string
	LastCommitted uint64
}

// SequenceBusyError is ClaimBatch's answer when another open batch holds
// the stream's next number: a second batch in flight would carry a number
// after one not yet committed.
type SequenceBusyError struct {
	ClientID string
	OpID     string // the open batch holding the number
	FlightID string
	Seq      uint64
	Own      bool // the batch is this Store's run's
	Expired  bool // its lease has run out (or it has none): its run died
}

func (e *SequenceBusyError) Error() string {
	who := "another live run"
	switch {
	case e.Own:
		who = "this run"
	case e.Expired:
		who = "a run that ended without settling it"
	}
	return fmt.Sprintf("client %s: sequence %d is held by open batch %s of flight %s (%s)",
		e.ClientID, e.Seq, e.OpID, e.FlightID, who)
}

// SequenceStream returns the stream of clientID at provider, creating it
// (nothing committed) the first time.
func (s *Store) SequenceStream(ctx context.Context, provider, clientID string) (Stream, error) {
	if provider == "" || clientID == "" {
		return Stream{}, errors.New("sequence stream: provider and client ID are required")
	}
	st := Stream{Provider: provider, ClientID: clientID}
	var last int64
	err := s.pool.QueryRow(ctx, `INSERT INTO upload_client_sequences (provider, client_id) VALUES ($1, $2)
		ON CONFLICT (provider, client_id) DO UPDATE SET provider = EXCLUDED.provider
		RETURNING id, last_committed`, provider, clientID).Scan(&st.ID, &last)
	if err != nil {
		return Stream{}, fmt.Errorf("sequence stream of client %s: %w", clientID, err)
	}
	st.LastCommitted = uint64(last)
	return st, nil
}

// lockStream locks the stream row and then, in a statement of its own (a
// snapshot taken after the lock was granted, so a batch another process
// journaled under the lock is seen), reads its last committed number and
// the open batch holding the next one, if any.
func (s *Store) lockStream(ctx context.Context, tx pgx.Tx, id int64) (Stream, *SequenceBusyError, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM upload_client_sequences WHERE id = $1 FOR UPDATE`, id); err != nil {
		return Stream{}, nil, err
	}
	st := Stream{ID: id}
	var last int64
	var opID, flight, owner *string
	var seq *int64
	var expired *bool
	err := tx.QueryRow(ctx, `SELECT s.provider, s.client_id, s.last_committed,
			b.op_id, b.flight_id, b.owner_run, b.client_seq, coalesce(b.lease_expires_at <= now(), true)
		FROM upload_client_sequences s
		LEFT JOIN upload_batches b ON b.client_stream = s.id AND b.state = 'open'
		WHERE s.id = $1`, id).Scan(&st.Provider, &st.ClientID, &last, &opID, &flight, &owner, &seq, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return Stream{}, nil, fmt.Errorf("sequence stream %d does not exist", id)
	}
	if err != nil {
		return Stream{}, nil, err
	}
	st.LastCommitted = uint64(last)
	if opID == nil {
		return st, nil, nil
	}
	busy := &SequenceBusyError{ClientID: st.ClientID, OpID: *opID, FlightID: *flight, Seq: uint64(*seq),
		Own: owner != nil && *owner == s.run.ID, Expired: *expired}
	return st, busy, nil
}

// SyncSequence raises the stream's last committed number to serverLast
// (what the provider's GET /v1/clients/{id}/state said) when no batch of
// the stream is open, so a lost local database or another tool using the
// client ID cannot make the next claim bind a number the provider already
// committed for another batch. It never lowers the number: a provider
// behind the client answers SEQUENCE_GAP, and RebindSequence follows it
// then. It reports whether the number changed.
func (s *Store) SyncSequence(ctx context.Context, stream int64, serverLast uint64) (bool, error) {
	if serverLast > math.MaxInt64 {
		return false, fmt.Errorf("sync sequence stream %d: %d is out of range", stream, serverLast)
	}
	var changed bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		st, busy, err := s.lockStream(ctx, tx, stream)
		if err != nil || busy != nil || serverLast <= st.LastCommitted {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE upload_client_sequences SET last_committed = $2, updated_at = now() WHERE id = $1`,
			stream, int64(serverLast))
		changed = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sync sequence stream %d to %d: %w", stream, serverLast, err)
	}
	return changed, nil
}

// RebindSequence follows a provider that answered SEQUENCE_GAP for the
// open batch opID: the stream's last committed number becomes
// serverLast (the provider's word) and the batch's number serverLast+1,
// durably, before the batch is resent under the same key and body. It
// returns the new number. The batch must be open, sequenced and this run's.
func (s *Store) RebindSequence(ctx context.Context, opID string, serverLast uint64) (uint64, error) {
	if serverLast >= math.MaxInt64 {
		return 0, fmt.Errorf("rebind batch %s: sequence %d is out of range", opID, serverLast)
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var stream *int64
		var state string
		var owner *string
		err := tx.QueryRow(ctx, `SELECT client_stream, state, owner_run FROM upload_batches WHERE op_id = $1`,
			opID).Scan(&stream, &state, &owner)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrBatchNotFound
		case err != nil:
			return err
		case stream == nil:
			return errors.New("the batch has no client sequence")
		}
		_, busy, err := s.lockStream(ctx, tx, *stream)
		switch {
		case err != nil:
			return err
		case state != "open" || busy == nil || busy.OpID != opID:
			return ErrBatchNotOpen
		case owner == nil || *owner != s.run.ID:
			return ErrNotOwner
		}
		if _, err := tx.Exec(ctx, `UPDATE upload_client_sequences SET last_committed = $2, updated_at = now() WHERE id = $1`,
			*stream, int64(serverLast)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE upload_batches SET client_seq = $2 WHERE op_id = $1`, opID, int64(serverLast)+1)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rebind batch %s to sequence %d: %w", opID, serverLast+1, err)
	}
	return serverLast + 1, nil
}

// FailCommittedBatch fails the open batch opID, as FailBatch does (its
// tiles are free, and await a lookup before any new key carries them),
// and counts its sequence number as committed: the provider said the
// number is committed (ALREADY_COMMITTED, or another batch's answer
// replayed for it) but not that this batch's tiles are stored. One
// durable transaction.
func (s *Store) FailCommittedBatch(ctx context.Context, opID string, httpStatus int, detail string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := advanceStream(ctx, tx, opID); err != nil {
			return err
		}
		_, err := failOpenBatch(ctx, tx, opID, httpStatus, detail)
		return err
	})
	if err != nil {
		return fmt.Errorf("fail committed batch %s: %w", opID, err)
	}
	return nil
}

// advanceStreamSQL makes an open sequenced batch's ($1) number its
// stream's last committed (never lowering it).
const advanceStreamSQL = `UPDATE upload_client_sequences s
	SET last_committed = greatest(s.last_committed, b.client_seq), updated_at = now()
	FROM upload_batches b WHERE b.op_id = $1 AND b.state = 'open' AND s.id = b.client_stream`

// advanceStream counts an open batch's number as committed. SettleBatch
// does the same in its pipelined writes, after locking the batch row (so an
// unsequenced settlement pays no extra round trip). A claim holding a
// stream row never waits for a batch or tile row (SKIP LOCKED; a stream
// with an open batch is refused), so claims and settlements cannot
// deadlock. A rebind (stream, then batch) and a settlement (batch, then
// stream) of one batch could, but only from two runs at once, which needs
// the owner to keep working after losing its lease; Postgres would then
// fail one of the two transactions.
func advanceStream(ctx context.Context, tx pgx.Tx, opID string) error {
	_, err := tx.Exec(ctx, advanceStreamSQL, opID)
	if err != nil {
		return fmt.Errorf("commit its client sequence: %w", err)
	}
	return nil
}
