package optable

import (
	"context"
	"time"
)

// Store is the operation table's persistence. Implementations make each
// method one atomic step; the Table builds the state machine on top.
//
// Implementing a Store: pass optabletest.Run. Outcomes handed to Finish
// and returned in records are read-only for both sides (the memory store
// shares them instead of copying, which keeps replay allocation-free).
// Stores never read a clock: every time comes in as an argument.
type Store interface {
	// Get returns k's record, or ErrNotFound.
	Get(ctx context.Context, k Key) (Record, error)
	// Admit makes the caller the execution owner of a.Key and returns the
	// new Live record with owner == true when the key is absent, or when
	// its record is Released or Indeterminate, a.Policy.Idem holds for the
	// stored record, the method and fingerprint match, and it has not
	// expired (ExpiresAt after a.Now); a reopened record gets Gen+1. The
	// Live record carries a.Token.
	// Otherwise it changes nothing and returns the current record with
	// owner == false. Concurrent Admits of one key produce one owner.
	Admit(ctx context.Context, a Admission) (rec Record, owner bool, err error)
	// Finish moves k from Live at generation gen to `to` (StateSealed with
	// out, StateReleased or StateIndeterminate), setting ExpiresAt and
	// UpdatedAt. If k is not Live at gen it changes nothing and returns the
	// current record with ErrNotOwner (ErrNotFound if absent). For a
	// durable store the transition is durable when Finish returns.
	Finish(ctx context.Context, k Key, gen uint64, f Finish) (Record, error)
	// Wait blocks until k is no longer Live at generation gen and returns
	// its record then, or returns ctx's error.
	Wait(ctx context.Context, k Key, gen uint64) (Record, error)
	// Recover runs once after a restart, before serving: every Live record
	// becomes Indeterminate (persist) or Released (volatile), because its
	// owner died with the old process. It returns how many changed.
	Recover(ctx context.Context, expiresAt, now time.Time) (int, error)
	// GC deletes non-Live records whose ExpiresAt is before cutoff and
	// returns how many. Live records are never deleted.
	GC(ctx context.Context, cutoff time.Time) (int, error)
}

// Admission is the input of Store.Admit.
type Admission struct {
	Key
	Method      string
	Fingerprint string
	Policy      Policy
	// Token is stored on the Live record (Record.Token), on a new one and
	// on a reopened one alike.
	Token uint64
	// Now is the admission time (UpdatedAt of the new record, and the
	// instant a reopened record must not have expired at).
	Now time.Time
	// ExpiresAt is stored on the Live record; it only matters once the
	// record leaves Live, when Finish overwrites it.
	ExpiresAt time.Time
}

// Finish is the input of Store.Finish.
type Finish struct {
	To        State
	Outcome   Outcome // the sealed outcome for StateSealed, ignored otherwise
	ExpiresAt time.Time
	Now       time.Time
}
