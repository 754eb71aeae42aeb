package optable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// DefaultRetention is the retry window when TableOptions.Retention is 0
// (docs/provider-api.md advertises retention_seconds = 86400).
const DefaultRetention = 24 * time.Hour

// TableOptions configure a Table. Every zero field has the stated default.
type TableOptions struct {
	// Retention is how long a finished operation is replayed: a record
	// expires Retention after it leaves Live. Default DefaultRetention.
	Retention time.Duration
	// GCMargin is how long an expired record is still kept (and so
	// recognised as expired) before GC deletes it
	// (retry.gc.ttl). Default: Retention.
	GCMargin time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// IssuedAt recognises when an ID was minted, so an ID whose record was
	// already collected is still rejected as expired (retry.gc.fail-closed)
	// rather than admitted as new. Default nil: IDs carry no time, and only
	// records (kept Retention + GCMargin) recognise expiry. UUIDv7IssuedAt
	// reads a UUIDv7's timestamp; it is opt-in because a client whose clock
	// is far behind (an RTC reset to 1970) would have every new ID
	// rejected as expired.
	IssuedAt func(opID string) (time.Time, bool)
}

// Table is the operation table: the retry state machine whose rules
// docs/conformance.md lists, over a Store. It is safe for concurrent use.
type Table struct {
	store     Store
	retention time.Duration
	margin    time.Duration
	now       func() time.Time
	issuedAt  func(string) (time.Time, bool)
	stranded  *strandings
}

// NewTable returns a Table over s.
func NewTable(s Store, o TableOptions) *Table {
	t := &Table{store: s, retention: o.Retention, margin: o.GCMargin, now: o.Now, issuedAt: o.IssuedAt,
		stranded: newStrandings()}
	if t.retention <= 0 {
		t.retention = DefaultRetention
	}
	if t.margin <= 0 {
		t.margin = t.retention
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.issuedAt == nil {
		t.issuedAt = func(string) (time.Time, bool) { return time.Time{}, false }
	}
	return t
}

// Store returns the table's store.
func (t *Table) Store() Store { return t.store }

// Retention returns the table's retry window.
func (t *Table) Retention() time.Duration { return t.retention }

// UUIDv7IssuedAt reads the millisecond timestamp of a UUIDv7 ID, for
// TableOptions.IssuedAt; other IDs are not recognised.
func UUIDv7IssuedAt(id string) (time.Time, bool) {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return time.Time{}, false
	}
	sec, nsec := u.Time().UnixTime()
	return time.Unix(sec, nsec), true
}

// Request is one attempt at an operation, as seen by the server.
type Request struct {
	Scope       string // the caller; IDs are scoped by it
	OpID        string
	Method      string
	Fingerprint string // of the payload; bound at admission
	Policy      Policy // the method's static policy
	// Wait bounds how long a duplicate of a Live operation attaches to it
	// and waits for its outcome. 0: do not wait, answer ErrProcessing.
	Wait time.Duration
}

func (r Request) key() Key { return Key{Scope: r.Scope, OpID: r.OpID} }

// maxBeginRounds bounds Begin's loop: each round sees a state change made
// by someone else, so a few suffice; past that the operation is busy.
const maxBeginRounds = 16

// Begin decides what this attempt does. It returns a Ticket that is either
// the owner of one execution (call Seal, Release or Abandon exactly once)
// or a replay of the sealed outcome. Errors: ErrConflict, ErrExpired,
// ErrProcessing, *IndeterminateError, the context's error while waiting,
// or a wrapped store error.
func (t *Table) Begin(ctx context.Context, r Request) (*Ticket, error) {
	k := r.key()
	var deadline time.Time
	if r.Wait > 0 {
		deadline = time.Now().Add(r.Wait) // wall clock: a wait is real time
	}
	// An admission is not undone by a dropped client: a store may commit
	// it and still report the cancellation (pgx does), which would leave a
	// live record nobody owns in a process that lives on
	// (TestAnAdmissionAClientLeftDuringIsOwnedNotOrphaned). Waiting for a
	// live duplicate still ends with ctx. A context without a Done channel
	// is never cancelled already, and is used as it is.
	actx := ctx
	if ctx.Done() != nil {
		actx = context.WithoutCancel(ctx)
	}
	token := newToken()
	for round := 0; round < maxBeginRounds; round++ {
		now := t.now()
		rec, owner, err := t.admit(actx, r, now, token)
		if err != nil {
			return nil, err
		}
		if owner {
			return &Ticket{t: t, rec: rec, owner: true}, nil
		}
		if ended, err := t.endStranded(actx, rec); err != nil {
			return nil, err
		} else if ended {
			continue
		}
		if rec.State != StateLive && !now.Before(rec.ExpiresAt) {
			return nil, ErrExpired
		}
		if rec.Method != r.Method || rec.Fingerprint != r.Fingerprint {
			return nil, ErrConflict
		}
		switch rec.State {
		case StateSealed:
			return &Ticket{t: t, rec: rec}, nil
		case StateReleased, StateIndeterminate:
			if !rec.Policy.Idem {
				return nil, &IndeterminateError{Key: k, From: rec.State}
			}
			continue // someone changed it between Admit's check and now
		case StateLive:
			if err := t.waitLive(ctx, k, rec.Gen, deadline); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("begin operation %s: record in state %s", k, rec.State)
		}
	}
	return nil, ErrProcessing
}

// admit is Store.Admit, except that an ID recognised as minted before the
// retry window is looked up instead of admitted: absent, it has expired.
func (t *Table) admit(ctx context.Context, r Request, now time.Time, token uint64) (Record, bool, error) {
	k := r.key()
	if at, ok := t.issuedAt(r.OpID); ok && now.Sub(at) >= t.retention {
		rec, err := t.store.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			return Record{}, false, ErrExpired
		}
		if err != nil {
			return Record{}, false, fmt.Errorf("look up operation %s: %w", k, err)
		}
		if rec.State == StateLive || now.Before(rec.ExpiresAt) {
			// Still inside its window: a normal admission applies.
			return t.storeAdmit(ctx, r, now, token)
		}
		return rec, false, nil
	}
	return t.storeAdmit(ctx, r, now, token)
}

func (t *Table) storeAdmit(ctx context.Context, r Request, now time.Time, token uint64) (Record, bool, error) {
	rec, owner, err := t.store.Admit(ctx, Admission{
		Key: r.key(), Method: r.Method, Fingerprint: r.Fingerprint, Policy: r.Policy, Token: token,
		Now: now, ExpiresAt: now.Add(t.retention),
	})
	if err != nil {
		// The admission may have committed all the same.
		t.strand(r.key(), token)
		return Record{}, false, fmt.Errorf("admit operation %s: %w", r.key(), err)
	}
	return rec, owner, nil
}

func (t *Table) waitLive(ctx context.Context, k Key, gen uint64, deadline time.Time) error {
	if deadline.IsZero() || !time.Now().Before(deadline) {
		return ErrProcessing
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	_, err := t.store.Wait(wctx, k, gen)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case wctx.Err() != nil:
		return ErrProcessing
	case errors.Is(err, ErrNotFound):
		return nil // collected meanwhile: the next round decides
	}
	return fmt.Errorf("wait for operation %s: %w", k, err)
}

// Lookup reports k's state for the operation state endpoint: Absent, Live,
// Sealed (with the record's outcome), Released, Indeterminate or Expired.
func (t *Table) Lookup(ctx context.Context, k Key) (State, Record, error) {
	now := t.now()
	rec, err := t.store.Get(ctx, k)
	if errors.Is(err, ErrNotFound) {
		if at, ok := t.issuedAt(k.OpID); ok && now.Sub(at) >= t.retention {
			return StateExpired, Record{}, nil
		}
		return StateAbsent, Record{}, nil
	}
	if err != nil {
		return 0, Record{}, fmt.Errorf("look up operation %s: %w", k, err)
	}
	if ended, err := t.endStranded(ctx, rec); err != nil {
		return 0, Record{}, err
	} else if ended {
		if rec, err = t.store.Get(ctx, k); err != nil {
			return 0, Record{}, fmt.Errorf("look up operation %s: %w", k, err)
		}
	}
	if rec.State != StateLive && !now.Before(rec.ExpiresAt) {
		return StateExpired, rec, nil
	}
	return rec.State, rec, nil
}

// Recover must run once after a restart, before serving: Live persist
// operations become Indeterminate (never Absent: retry.policy.persist.crash),
// Live volatile ones Released.
func (t *Table) Recover(ctx context.Context) (int, error) {
	now := t.now()
	n, err := t.store.Recover(ctx, now.Add(t.retention), now)
	if err != nil {
		return 0, fmt.Errorf("recover operation table: %w", err)
	}
	return n, nil
}

// GC deletes records that expired more than GCMargin ago. Live records are
// kept whatever their age (retry.gc.live-protected). It first ends the
// records this table stranded (see strandings).
func (t *Table) GC(ctx context.Context) (int, error) {
	serr := t.endAllStranded(ctx)
	n, err := t.store.GC(ctx, t.now().Add(-t.margin))
	if err != nil {
		return 0, errors.Join(fmt.Errorf("collect operation records: %w", err), serr)
	}
	return n, serr
}

// CollectEvery runs GC on every tick until ctx ends (pass a
// time.Ticker's C). report, when not nil, is told each run's count and
// error; a failed run is retried on the next tick.
func (t *Table) CollectEvery(ctx context.Context, tick <-chan time.Time, report func(n int, err error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			n, err := t.GC(ctx)
			if report != nil {
				report(n, err)
			}
		}
	}
}
