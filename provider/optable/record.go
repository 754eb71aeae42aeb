package optable

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Policy is a method's static retry policy, fixed at admission
// (seed rules retry.policy.*). The zero value is volatile + non-idem, the
// spec's default.
type Policy struct {
	// Persist: once admitted the operation is never released; after a crash
	// it is Sealed (its outcome was durable) or Indeterminate, never Absent.
	Persist bool
	// Idem: re-executing the same logical operation is safe, so a Released
	// or Indeterminate operation may run again under the same ID.
	Idem bool
}

// State is where an operation ID stands in the operation table.
type State uint8

const (
	// StateAbsent: no record of the ID.
	StateAbsent State = iota
	// StateLive: admitted, one execution owner, not terminal yet.
	StateLive
	// StateReleased: a volatile operation given up without an outcome.
	StateReleased
	// StateSealed: a terminal outcome is recorded; absorbing.
	StateSealed
	// StateIndeterminate: the table cannot prove whether the operation
	// reached a terminal outcome (a crash while it was Live).
	StateIndeterminate
	// StateExpired: the ID is recognised but older than the retention
	// window; a retry is rejected, never admitted as new.
	StateExpired
)

var stateNames = [...]string{"absent", "live", "released", "sealed", "indeterminate", "expired"}

// String is the state's wire name (docs/provider-api.md, "Operation state").
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

func parseState(s string) (State, error) {
	for i, n := range stateNames {
		if n == s {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("unknown operation state %q", s)
}

// Outcome is an operation's terminal result, opaque to the table: sealed
// bytes are replayed byte for byte.
type Outcome struct {
	Status int
	Header http.Header
	Body   []byte
	// Failure marks a sealed application failure. It is replayed as that
	// same failure, never turned into a fresh attempt
	// (retry.seal.terminal-replay, retry.outcome.sealed-vs-runtime).
	Failure bool
}

// Key names one operation: IDs are scoped by caller, so the same ID from
// two scopes names two operations (retry.op-id.scope).
type Key struct {
	Scope string
	OpID  string
}

func (k Key) String() string { return k.Scope + "/" + k.OpID }

// Record is one row of the operation table.
type Record struct {
	Key
	Method      string
	Fingerprint string
	Policy      Policy
	State       State
	// Gen counts admissions of this key. An owner holds one generation; a
	// transition by a stale generation (an owner fenced by release, crash
	// or a newer owner) is refused with ErrNotOwner.
	Gen uint64
	// Token names the admission that made the record Live (a Table mints
	// a random one per attempt; 0: none), so a table can tell an admission
	// whose answer it lost, and so owns without a ticket, from anyone
	// else's.
	Token   uint64
	Outcome *Outcome // set when State == StateSealed
	// ExpiresAt is when a non-live record stops being replayable: the
	// retention window measured from its last transition. Live records
	// never expire.
	ExpiresAt time.Time
	UpdatedAt time.Time
}

// Errors callers tell apart.
var (
	// ErrConflict: the ID is known with another method or fingerprint
	// (retry.op-id.payload-binding). A conflict never executes.
	ErrConflict = errors.New("operation ID reused with a different method or payload")
	// ErrExpired: the ID is recognised as older than the retention window
	// (retry.gc.fail-closed). It is never admitted as new.
	ErrExpired = errors.New("operation ID expired")
	// ErrProcessing: the operation is Live and the caller chose not to wait,
	// or its wait bound passed.
	ErrProcessing = errors.New("operation is still in progress")
	// ErrNotOwner: a Seal/Release by a ticket that no longer owns the live
	// generation (it lost a race to a crash recovery or a seal).
	ErrNotOwner = errors.New("not the live owner of the operation")
	// ErrNotFound is returned by Store.Get for an absent key.
	ErrNotFound = errors.New("operation record not found")
)

// IndeterminateError is the first-class Indeterminate outcome
// (retry.outcome.indeterminate): the table refused to guess. It is a
// distinct type so callers can tell it from a sealed application failure,
// a transport failure and cancellation (retry.outcome.indeterminate.distinct).
type IndeterminateError struct {
	Key Key
	// From is the state that led here: StateReleased or StateIndeterminate.
	From State
}

func (e *IndeterminateError) Error() string {
	return fmt.Sprintf("operation %s is indeterminate (was %s) and its method is not idempotent", e.Key, e.From)
}

// IsIndeterminate reports whether err is or wraps an *IndeterminateError.
func IsIndeterminate(err error) bool {
	var ie *IndeterminateError
	return errors.As(err, &ie)
}

func cloneOutcome(o *Outcome) *Outcome {
	if o == nil {
		return nil
	}
	c := *o
	if o.Header != nil {
		c.Header = o.Header.Clone()
	}
	if o.Body != nil {
		c.Body = append([]byte(nil), o.Body...)
	}
	return &c
}
