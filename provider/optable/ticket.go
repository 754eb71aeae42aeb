package optable

import (
	"context"
	"errors"
	"fmt"
)

// Ticket is Begin's answer: the owner of one execution, or a replay.
type Ticket struct {
	t     *Table
	rec   Record
	owner bool
}

// Owner reports whether this attempt owns the execution: it must run the
// operation and end with exactly one of Seal, Release or Abandon.
func (tk *Ticket) Owner() bool { return tk.owner }

// Replayed reports whether the ticket carries an earlier sealed outcome.
func (tk *Ticket) Replayed() bool { return !tk.owner }

// Outcome is the sealed outcome of a replay ticket (read-only).
func (tk *Ticket) Outcome() Outcome {
	if tk.rec.Outcome == nil {
		return Outcome{}
	}
	return *tk.rec.Outcome
}

// Record is the record as this ticket saw it.
func (tk *Ticket) Record() Record { return tk.rec }

// Seal records the outcome (retry.seal.return). It returns once the
// outcome is stored (durably, for a durable store: retry.policy.persist.seal).
// If the ticket lost its ownership first (a crash recovery), it returns
// ErrNotOwner and the record as it now stands: the first transition wins.
func (tk *Ticket) Seal(ctx context.Context, out Outcome) (Record, error) {
	return tk.finish(ctx, StateSealed, out)
}

// Release gives the operation up without an outcome because the caller
// cancelled or dropped interest. A volatile operation becomes Released
// (retry.cancel.*.volatile); a persist one stays Live and Release only
// detaches this observer (retry.cancel.*.persist) and returns nil.
func (tk *Ticket) Release(ctx context.Context) error {
	if tk.rec.Policy.Persist {
		return nil
	}
	_, err := tk.finish(ctx, StateReleased, Outcome{})
	return err
}

// Abandon ends an execution that failed without an outcome (a panic, a
// lost dependency): a volatile operation is Released, a persist one becomes
// Indeterminate, since its effects may have happened.
func (tk *Ticket) Abandon(ctx context.Context) error {
	to := StateReleased
	if tk.rec.Policy.Persist {
		to = StateIndeterminate
	}
	_, err := tk.finish(ctx, to, Outcome{})
	return err
}

func (tk *Ticket) finish(ctx context.Context, to State, out Outcome) (Record, error) {
	if !tk.owner {
		return tk.rec, ErrNotOwner
	}
	now := tk.t.now()
	rec, err := tk.t.store.Finish(ctx, tk.rec.Key, tk.rec.Gen, Finish{
		To: to, Outcome: out, ExpiresAt: now.Add(tk.t.retention), Now: now,
	})
	if errors.Is(err, ErrNotOwner) || errors.Is(err, ErrNotFound) {
		return rec, ErrNotOwner
	}
	if err != nil {
		if to != StateSealed {
			// Giving up is how an owner ends: the table ends it later.
			tk.t.strand(tk.rec.Key, tk.rec.Token)
		}
		return rec, fmt.Errorf("%s operation %s: %w", verb(to), tk.rec.Key, err)
	}
	tk.rec = rec
	return rec, nil
}

func verb(s State) string {
	switch s {
	case StateSealed:
		return "seal"
	case StateReleased:
		return "release"
	}
	return "mark indeterminate"
}
