package optable

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Strict client sequencing (docs/provider-api.md "Strict client
// sequencing (optional)"): per (scope, client) the server keeps the last
// committed sequence durably; batch n runs only when n == last+1, one
// number per batch, and a failed batch consumes none.

// ErrAlreadyCommitted: n <= last committed and its outcome is no longer
// cached (409 ALREADY_COMMITTED).
var ErrAlreadyCommitted = errors.New("sequence already committed")

// SequenceGapError: n > last committed + 1 (409 SEQUENCE_GAP).
type SequenceGapError struct {
	ClientID      string
	Got           uint64
	LastCommitted uint64
}

func (e *SequenceGapError) Error() string {
	return fmt.Sprintf("client %s sent sequence %d after last committed %d", e.ClientID, e.Got, e.LastCommitted)
}

// SequenceStore keeps each client's last committed sequence durably.
// Implementations: MemorySequenceStore, PGSequenceStore.
type SequenceStore interface {
	// Last returns the last committed sequence, 0 for an unknown client.
	Last(ctx context.Context, scope, clientID string) (uint64, error)
	// Advance sets the last committed sequence to n if it is n-1, in one
	// atomic step, and reports whether it did.
	Advance(ctx context.Context, scope, clientID string, n uint64) (bool, error)
}

// SequencerOptions configure a Sequencer; zero fields take the defaults.
type SequencerOptions struct {
	CacheSize int              // outcomes kept for duplicates; default 10000
	CacheTTL  time.Duration    // how long one is kept; default 5 minutes
	Now       func() time.Time // default time.Now
}

// Sequencer enforces strict sequencing over a SequenceStore. Batches of
// one client run one at a time; different clients run concurrently.
type Sequencer struct {
	store SequenceStore
	cache *outcomeLRU

	mu    sync.Mutex
	locks map[seqKey]*clientLock
}

type seqKey struct{ scope, client string }

type clientLock struct {
	mu   sync.Mutex
	refs int
}

// NewSequencer returns a Sequencer over s.
func NewSequencer(s SequenceStore, o SequencerOptions) *Sequencer {
	if o.CacheSize <= 0 {
		o.CacheSize = 10000
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Sequencer{store: s, cache: newOutcomeLRU(o.CacheSize, o.CacheTTL, o.Now), locks: map[seqKey]*clientLock{}}
}

// Last returns the client's last committed sequence (GetClientState).
func (q *Sequencer) Last(ctx context.Context, scope, clientID string) (uint64, error) {
	n, err := q.store.Last(ctx, scope, clientID)
	if err != nil {
		return 0, fmt.Errorf("client %s state: %w", clientID, err)
	}
	return n, nil
}

// ErrOutcomeNotStored: a batch ran with a successful answer that its
// Batch.Stored says was not stored durably, so its number was not
// committed (500; the resend runs it again under the same number).
var ErrOutcomeNotStored = errors.New("batch outcome not stored")

// Batch is one sequenced request as Do runs it.
type Batch struct {
	// Run executes the batch (through the idempotency table, in the
	// provider) and returns its outcome.
	Run func(context.Context) Outcome
	// Known reports whether the idempotency table holds a record of the
	// batch's key. A committed number whose outcome left the cache is
	// then answered by Run (the table replays or recovers its key's
	// outcome) instead of ErrAlreadyCommitted. nil: never known.
	Known func(context.Context) (bool, error)
	// Stored reports whether Run's successful outcome is durably sealed;
	// n is committed only then. nil: always.
	Stored func(context.Context) (bool, error)
}

// Do runs batch n of the client. n == last+1: b.Run is called, and a
// successful outcome (2xx, not Failure) that b.Stored confirms commits n
// and is cached; a failed one commits nothing; an unstored one commits
// nothing and is ErrOutcomeNotStored. n <= last: the cached outcome with
// replayed == true, else b.Run's outcome when b.Known, else
// ErrAlreadyCommitted; nothing commits. n > last+1: *SequenceGapError.
func (q *Sequencer) Do(ctx context.Context, scope, clientID string, n uint64, b Batch) (out Outcome, replayed bool, err error) {
	if n == 0 {
		return Outcome{}, false, fmt.Errorf("client %s: sequence numbers start at 1", clientID)
	}
	k := seqKey{scope, clientID}
	unlock := q.lock(k)
	defer unlock()
	last, err := q.store.Last(ctx, scope, clientID)
	if err != nil {
		return Outcome{}, false, fmt.Errorf("client %s state: %w", clientID, err)
	}
	switch {
	case n <= last:
		if o, ok := q.cache.get(k, n); ok {
			return o, true, nil
		}
		return q.committed(ctx, clientID, n, b)
	case n > last+1:
		return Outcome{}, false, &SequenceGapError{ClientID: clientID, Got: n, LastCommitted: last}
	}
	out = b.Run(ctx)
	if out.Failure || out.Status < 200 || out.Status > 299 {
		return out, false, nil
	}
	// Seal, then commit: a crash between them leaves a sealed batch whose
	// number is last+1, and its resend replays the seal and commits it.
	if b.Stored != nil {
		stored, err := b.Stored(context.WithoutCancel(ctx))
		if err != nil {
			return Outcome{}, false, fmt.Errorf("commit client %s sequence %d: check its outcome is stored: %w", clientID, n, err)
		}
		if !stored {
			return Outcome{}, false, fmt.Errorf("commit client %s sequence %d: %w", clientID, n, ErrOutcomeNotStored)
		}
	}
	ok, err := q.store.Advance(context.WithoutCancel(ctx), scope, clientID, n)
	if err != nil {
		return Outcome{}, false, fmt.Errorf("commit client %s sequence %d: %w", clientID, n, err)
	}
	if !ok {
		// Another process committed n meanwhile (the lock is per process).
		return Outcome{}, false, fmt.Errorf("commit client %s sequence %d: %w", clientID, n, ErrAlreadyCommitted)
	}
	q.cache.put(k, n, out)
	return out, false, nil
}

// committed answers a committed number whose outcome is not cached: the
// idempotency table's answer for the batch's key when it knows the key,
// else ErrAlreadyCommitted. The cache goes with a restart; the table's
// record does not, and a record left unsealed by a crash is recovered by
// the table as for an unsequenced request. Nothing commits here.
func (q *Sequencer) committed(ctx context.Context, clientID string, n uint64, b Batch) (Outcome, bool, error) {
	if b.Known == nil {
		return Outcome{}, false, ErrAlreadyCommitted
	}
	known, err := b.Known(ctx)
	if err != nil {
		return Outcome{}, false, fmt.Errorf("client %s sequence %d is committed: look up its batch: %w", clientID, n, err)
	}
	if !known {
		return Outcome{}, false, ErrAlreadyCommitted
	}
	return b.Run(ctx), false, nil
}

func (q *Sequencer) lock(k seqKey) func() {
	q.mu.Lock()
	l := q.locks[k]
	if l == nil {
		l = &clientLock{}
		q.locks[k] = l
	}
	l.refs++
	q.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		q.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(q.locks, k)
		}
		q.mu.Unlock()
	}
}

// MemorySequenceStore is an in-process SequenceStore.
type MemorySequenceStore struct {
	mu   sync.Mutex
	last map[seqKey]uint64
}

var _ SequenceStore = (*MemorySequenceStore)(nil)

// NewMemorySequenceStore returns an empty store.
func NewMemorySequenceStore() *MemorySequenceStore {
	return &MemorySequenceStore{last: map[seqKey]uint64{}}
}

// Last implements SequenceStore.
func (m *MemorySequenceStore) Last(_ context.Context, scope, clientID string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[seqKey{scope, clientID}], nil
}

// Advance implements SequenceStore.
func (m *MemorySequenceStore) Advance(_ context.Context, scope, clientID string, n uint64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := seqKey{scope, clientID}
	if m.last[k] != n-1 {
		return false, nil
	}
	m.last[k] = n
	return true, nil
}
