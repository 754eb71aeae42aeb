package optable

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"

	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed pgschema.sql
var pgSchema string

// schemaLockID serialises concurrent EnsureSchema calls: CREATE ... IF NOT
// EXISTS alone can still collide on the catalog when two run at once.
const schemaLockID = 0x6f705f7265637331

// EnsureSchema creates the operation_records and client_sequences tables
// and their indexes if they are missing. It is safe to call on every start.
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("ensure operation schema: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockID)); err != nil {
		return fmt.Errorf("ensure operation schema: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, pgSchema); err != nil {
		return fmt.Errorf("ensure operation schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("ensure operation schema: commit: %w", err)
	}
	return nil
}

// PGStore is a durable Store on Postgres (pgx/v5). Admission and every
// transition are single statements, durable when they return, so a persist
// operation is never reported Sealed before its outcome is on disk.
//
// Waiting for a Live operation polls its row with a backoff from
// PGStore.PollMin to PollMax (defaults 2 ms and 100 ms) rather than using
// LISTEN/NOTIFY: a wait is bounded by the caller (MiddlewareOptions.WaitLive)
// and needs no dedicated connection per waiter, and polling cannot miss a
// notification sent between the check and the LISTEN.
type PGStore struct {
	pool    *pgxpool.Pool
	PollMin time.Duration // default 2 ms
	PollMax time.Duration // default 100 ms
}

var _ Store = (*PGStore)(nil)

// NewPGStore returns a store over pool. Call EnsureSchema first.
func NewPGStore(pool *pgxpool.Pool) *PGStore {
	return &PGStore{pool: pool, PollMin: 2 * time.Millisecond, PollMax: 100 * time.Millisecond}
}

const pgCols = `scope, op_id, method, fingerprint, persist, idem, state, gen, admission_token,
	outcome_status, outcome_header, outcome_body, outcome_failure, expires_at, updated_at`

func scanRecord(row pgx.Row) (Record, error) {
	var (
		r       Record
		state   string
		gen     int64
		token   int64
		status  *int32
		header  []byte
		body    []byte
		failure *bool
	)
	err := row.Scan(&r.Scope, &r.OpID, &r.Method, &r.Fingerprint, &r.Policy.Persist, &r.Policy.Idem,
		&state, &gen, &token, &status, &header, &body, &failure, &r.ExpiresAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, err
	}
	if r.State, err = parseState(state); err != nil {
		return Record{}, err
	}
	r.Gen, r.Token = uint64(gen), uint64(token)
	if status != nil {
		out := &Outcome{Status: int(*status), Body: body, Failure: failure != nil && *failure}
		if len(header) > 0 && string(header) != "null" {
			if err := json.Unmarshal(header, &out.Header); err != nil {
				return Record{}, fmt.Errorf("decode sealed header: %w", err)
			}
		}
		if out.Body == nil {
			out.Body = []byte{}
		}
		r.Outcome = out
	}
	return r, nil
}

// Get implements Store.
func (s *PGStore) Get(ctx context.Context, k Key) (Record, error) {
	rec, err := scanRecord(s.pool.QueryRow(ctx,
		`SELECT `+pgCols+` FROM operation_records WHERE scope = $1 AND op_id = $2`, k.Scope, k.OpID))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Record{}, fmt.Errorf("get operation %s: %w", k, err)
	}
	return rec, err
}

// admitSQL inserts a Live record, or reopens a Released/Indeterminate idem
// record with the same binding that has not expired. Concurrent admits
// serialise on the row: the losers re-check the WHERE against the winner's
// Live row and return nothing.
const admitSQL = `INSERT INTO operation_records AS r
	(scope, op_id, method, fingerprint, persist, idem, state, gen, admission_token, expires_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, 'live', 1, $9, $7, $8)
ON CONFLICT (scope, op_id) DO UPDATE SET
	state = 'live', gen = r.gen + 1, admission_token = EXCLUDED.admission_token, expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
WHERE r.state IN ('released', 'indeterminate') AND r.idem
	AND r.method = EXCLUDED.method AND r.fingerprint = EXCLUDED.fingerprint
	AND r.expires_at > EXCLUDED.updated_at
RETURNING ` + pgCols

// Admit implements Store.
func (s *PGStore) Admit(ctx context.Context, a Admission) (Record, bool, error) {
	// A record collected between the INSERT and the SELECT is absent
	// again, so the INSERT is retried; GC only removes long-expired rows,
	// so one more round settles it.
	for range 3 {
		rec, err := scanRecord(s.pool.QueryRow(ctx, admitSQL, a.Scope, a.OpID, a.Method, a.Fingerprint,
			a.Policy.Persist, a.Policy.Idem, a.ExpiresAt, a.Now, int64(a.Token)))
		if err == nil {
			return rec, true, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return Record{}, false, fmt.Errorf("admit operation %s: %w", a.Key, err)
		}
		rec, err = s.Get(ctx, a.Key)
		if !errors.Is(err, ErrNotFound) {
			return rec, false, err
		}
	}
	return Record{}, false, fmt.Errorf("admit operation %s: record keeps vanishing", a.Key)
}

const finishSQL = `UPDATE operation_records SET
	state = $4, outcome_status = $5, outcome_header = $6, outcome_body = $7, outcome_failure = $8,
	expires_at = $9, updated_at = $10
WHERE scope = $1 AND op_id = $2 AND state = 'live' AND gen = $3
RETURNING ` + pgCols

// Finish implements Store.
func (s *PGStore) Finish(ctx context.Context, k Key, gen uint64, f Finish) (Record, error) {
	if err := checkFinish(f); err != nil {
		return Record{}, err
	}
	var (
		status  *int32
		header  []byte
		body    []byte
		failure *bool
	)
	if f.To == StateSealed {
		st := int32(f.Outcome.Status)
		status, failure, body = &st, &f.Outcome.Failure, f.Outcome.Body
		if body == nil {
			body = []byte{}
		}
		if f.Outcome.Header != nil {
			h, err := json.Marshal(f.Outcome.Header)
			if err != nil {
				return Record{}, fmt.Errorf("seal operation %s: encode header: %w", k, err)
			}
			header = h
		}
	}
	rec, err := scanRecord(s.pool.QueryRow(ctx, finishSQL, k.Scope, k.OpID, int64(gen), f.To.String(),
		status, header, body, failure, f.ExpiresAt, f.Now))
	if err == nil {
		return rec, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return Record{}, fmt.Errorf("%s operation %s: %w", verb(f.To), k, err)
	}
	rec, err = s.Get(ctx, k)
	if err != nil {
		return Record{}, err
	}
	return rec, ErrNotOwner
}

// Wait implements Store by polling with backoff (see PGStore).
func (s *PGStore) Wait(ctx context.Context, k Key, gen uint64) (Record, error) {
	delay := s.PollMin
	for {
		rec, err := s.Get(ctx, k)
		if err != nil {
			return Record{}, err
		}
		if rec.State != StateLive || rec.Gen != gen {
			return rec, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return Record{}, ctx.Err()
		case <-t.C:
		}
		if delay *= 2; delay > s.PollMax {
			delay = s.PollMax
		}
	}
}

// Recover implements Store.
func (s *PGStore) Recover(ctx context.Context, expiresAt, now time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE operation_records
		SET state = CASE WHEN persist THEN 'indeterminate' ELSE 'released' END, expires_at = $1, updated_at = $2
		WHERE state = 'live'`, expiresAt, now)
	if err != nil {
		return 0, fmt.Errorf("recover live operations: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// GC implements Store.
func (s *PGStore) GC(ctx context.Context, cutoff time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM operation_records WHERE state <> 'live' AND expires_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("collect operation records: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
