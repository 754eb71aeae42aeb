package optable

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// A record is stranded when it is Live and nothing in this process will
// ever end it, while the process lives on: Store.Admit committed and then
// failed to say so (the connection broke on the way back), so no ticket
// owns it; or its owner's Release or Abandon could not reach the store.
// Recover ends such records after a restart; until then the table that
// stranded them remembers their admission tokens and ends each one
// (Indeterminate when persist, else Released, as Recover does) at the
// next Begin or Lookup of its key, or at the next GC. Without that, every
// resend of the key would be answered ErrProcessing for as long as the
// process lives.
//
// No lease lets another attempt take a Live record over: docs/provider-api.md
// has a running batch answer 409 IDEMPOTENCY_PROCESSING, and an owner that
// is only slow must keep its operation to itself (retry.duplicate.live).
// Only the table whose admission it was can tell a stranded record from a
// running one, by its token.
type strandings struct {
	mu    sync.Mutex
	marks map[Key]strandMark
}

type strandMark struct {
	token uint64
	at    time.Time // the table's clock when it stranded
}

func newStrandings() *strandings { return &strandings{marks: map[Key]strandMark{}} }

// newToken mints a token for one admission: random, so that the tokens of
// two processes sharing a store do not meet, and never 0, the token of a
// record admitted without one.
func newToken() uint64 {
	for {
		if tok := rand.Uint64(); tok != 0 {
			return tok
		}
	}
}

func (s *strandings) mark(k Key, token uint64, now time.Time) {
	s.mu.Lock()
	s.marks[k] = strandMark{token: token, at: now}
	s.mu.Unlock()
}

// ours reports whether rec is a Live record this table stranded.
func (s *strandings) ours(rec Record) bool {
	if rec.State != StateLive {
		return false
	}
	s.mu.Lock()
	m, ok := s.marks[rec.Key]
	s.mu.Unlock()
	return ok && m.token == rec.Token
}

func (s *strandings) forget(k Key, token uint64) {
	s.mu.Lock()
	if s.marks[k].token == token {
		delete(s.marks, k)
	}
	s.mu.Unlock()
}

func (s *strandings) snapshot() map[Key]strandMark {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Key]strandMark, len(s.marks))
	for k, m := range s.marks {
		out[k] = m
	}
	return out
}

// strand remembers that the Live record of k admitted under token may
// have no owner left.
func (t *Table) strand(k Key, token uint64) { t.stranded.mark(k, token, t.now()) }

// endStranded ends rec if this table stranded it and reports whether it
// did (or someone else ended it first). The caller reads the record again.
func (t *Table) endStranded(ctx context.Context, rec Record) (bool, error) {
	if !t.stranded.ours(rec) {
		return false, nil
	}
	to := StateReleased
	if rec.Policy.Persist {
		to = StateIndeterminate
	}
	now := t.now()
	_, err := t.store.Finish(ctx, rec.Key, rec.Gen, Finish{To: to, ExpiresAt: now.Add(t.retention), Now: now})
	if err != nil && !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrNotFound) {
		return false, fmt.Errorf("end stranded operation %s: %w", rec.Key, err)
	}
	t.stranded.forget(rec.Key, rec.Token)
	return true, nil
}

// endAllStranded ends every stranded record, and forgets the marks whose
// record is no longer Live under their token. A mark whose key has no
// record is kept for a retention period: an admission's commit can land
// after its connection reported the failure.
func (t *Table) endAllStranded(ctx context.Context) error {
	var errs []error
	for k, m := range t.stranded.snapshot() {
		rec, err := t.store.Get(ctx, k)
		switch {
		case errors.Is(err, ErrNotFound):
			if t.now().Sub(m.at) >= t.retention {
				t.stranded.forget(k, m.token)
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("look up stranded operation %s: %w", k, err))
		case rec.State != StateLive || rec.Token != m.token:
			t.stranded.forget(k, m.token)
		default:
			if _, err := t.endStranded(ctx, rec); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
