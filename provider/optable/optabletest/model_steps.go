package optabletest

import (
	"context"
	"errors"
	"time"

	"github.com/tilectl/tilectl/provider/optable"
)

// The model's steps: each runs one operation against the table and checks
// its answer against the model's prediction.

func (m *model) req(k *mkey) optable.Request {
	return optable.Request{Scope: "model", OpID: k.id, Method: "m", Fingerprint: "fp", Policy: k.pol}
}

func (m *model) begin(k *mkey) (p pending, owned bool) {
	m.withKey(k, func(tbl *optable.Table) {
		tk, err := tbl.Begin(context.Background(), m.req(k))
		switch {
		case k.dead:
			if !errors.Is(err, optable.ErrExpired) {
				m.fail(k, "begin of expired ID: ticket %v err %v, want ErrExpired", tk, err)
			}
		case k.state == optable.StateAbsent ||
			(k.pol.Idem && (k.state == optable.StateReleased || k.state == optable.StateIndeterminate)):
			if err != nil || !tk.Owner() || tk.Record().Gen != k.gen+1 {
				m.fail(k, "begin: ticket %v err %v, want owner gen %d", tk, err, k.gen+1)
				return
			}
			k.state, k.gen = optable.StateLive, k.gen+1
			p, owned = pending{k: k, tk: tk, gen: k.gen}, true
		case k.state == optable.StateLive:
			if !errors.Is(err, optable.ErrProcessing) {
				m.fail(k, "duplicate of live: ticket %v err %v, want ErrProcessing", tk, err)
			}
		case k.state == optable.StateSealed:
			if err != nil || tk.Owner() {
				m.fail(k, "duplicate of sealed: ticket %v err %v, want replay", tk, err)
				return
			}
			m.checkOutcome(k, tk.Outcome())
		default: // released or indeterminate, non-idem
			var ie *optable.IndeterminateError
			if !errors.As(err, &ie) || ie.From != k.state {
				m.fail(k, "duplicate of %s non-idem: ticket %v err %v, want IndeterminateError", k.state, tk, err)
			}
		}
	})
	return p, owned
}

func (m *model) conflict(k *mkey, otherMethod bool) {
	m.withKey(k, func(tbl *optable.Table) {
		if k.state == optable.StateAbsent && !k.dead {
			return // an absent ID has no binding yet: it would be admitted
		}
		r := m.req(k)
		if otherMethod {
			r.Method = "other"
		} else {
			r.Fingerprint = "other"
		}
		tk, err := tbl.Begin(context.Background(), r)
		want := optable.ErrConflict
		if k.dead {
			want = optable.ErrExpired
		}
		if !errors.Is(err, want) {
			m.fail(k, "conflicting begin: ticket %v err %v, want %v", tk, err, want)
		}
	})
}

func (m *model) finishWant(p pending) bool {
	return p.k.state == optable.StateLive && p.k.gen == p.gen
}

func (m *model) seal(p pending, out optable.Outcome) {
	k := p.k
	m.withKey(k, func(*optable.Table) {
		_, err := p.tk.Seal(context.Background(), out)
		if !m.finishWant(p) {
			if !errors.Is(err, optable.ErrNotOwner) {
				m.fail(k, "seal by fenced owner gen %d: %v, want ErrNotOwner", p.gen, err)
			}
			return
		}
		if err != nil {
			m.fail(k, "seal by owner gen %d: %v", p.gen, err)
			return
		}
		k.state, k.outcome = optable.StateSealed, &out
	})
}

func (m *model) release(p pending) {
	k := p.k
	m.withKey(k, func(*optable.Table) {
		err := p.tk.Release(context.Background())
		switch {
		case k.pol.Persist:
			if err != nil {
				m.fail(k, "release of persist op: %v, want nil (detach only)", err)
			}
		case !m.finishWant(p):
			if !errors.Is(err, optable.ErrNotOwner) {
				m.fail(k, "release by fenced owner: %v, want ErrNotOwner", err)
			}
		case err != nil:
			m.fail(k, "release: %v", err)
		default:
			k.state = optable.StateReleased
		}
	})
}

func (m *model) abandon(p pending) {
	k := p.k
	m.withKey(k, func(*optable.Table) {
		err := p.tk.Abandon(context.Background())
		switch {
		case !m.finishWant(p):
			if !errors.Is(err, optable.ErrNotOwner) {
				m.fail(k, "abandon by fenced owner: %v, want ErrNotOwner", err)
			}
		case err != nil:
			m.fail(k, "abandon: %v", err)
		case k.pol.Persist:
			k.state = optable.StateIndeterminate
		default:
			k.state = optable.StateReleased
		}
	})
}

func (m *model) lookup(k *mkey) {
	m.withKey(k, func(tbl *optable.Table) {
		st, _, err := tbl.Lookup(context.Background(), optable.Key{Scope: "model", OpID: k.id})
		want := k.state
		if k.dead && k.state != optable.StateLive {
			want = optable.StateExpired
		}
		if err != nil || st != want {
			m.fail(k, "lookup: %s %v, want %s", st, err, want)
		}
	})
}

// attach starts a duplicate that waits for a live non-idem operation
// outside the key lock, racing the owner's seal and other duplicates. A non-idem ID that exists is never admitted again, so the
// waiter must never become an owner.
func (m *model) attach(k *mkey, wait time.Duration) {
	m.withKey(k, func(tbl *optable.Table) {
		if k.pol.Idem || k.state == optable.StateAbsent || k.dead {
			return
		}
		m.waiters.Add(1)
		go func() {
			defer m.waiters.Done()
			m.world.RLock()
			defer m.world.RUnlock()
			r := m.req(k)
			r.Wait = wait
			tk, err := m.table.Begin(context.Background(), r)
			switch {
			case err == nil && tk.Owner():
				m.t.Errorf("key %s: a waiting duplicate became a second owner", k.id)
			case err == nil:
				m.obsMu.Lock()
				m.observed[k] = append(m.observed[k], tk.Outcome())
				m.obsMu.Unlock()
			case errors.Is(err, optable.ErrProcessing), optable.IsIndeterminate(err),
				// An expire may run between the launch and this Begin.
				errors.Is(err, optable.ErrExpired):
			default:
				m.t.Errorf("key %s: waiting duplicate: %v", k.id, err)
			}
		}()
	})
}

func (m *model) crash() {
	m.world.Lock()
	defer m.world.Unlock()
	m.store = m.h.Restart(m.t, m.store)
	m.table = m.newTable(m.store)
	if _, err := m.table.Recover(context.Background()); err != nil {
		m.t.Errorf("recover: %v", err)
	}
	for _, k := range m.allKeys() {
		if k.state == optable.StateLive {
			k.state = optable.StateReleased
			if k.pol.Persist {
				k.state = optable.StateIndeterminate
			}
		}
	}
}

// expire moves the clock past retention and margin: every key not Live
// now is expired for good; Live ones are protected and expire later.
func (m *model) expire(gc bool) {
	m.world.Lock()
	defer m.world.Unlock()
	m.clock.Advance(retention + margin + time.Second)
	if gc {
		if _, err := m.table.GC(context.Background()); err != nil {
			m.t.Errorf("gc: %v", err)
		}
	}
	for _, k := range m.allKeys() {
		if k.state != optable.StateLive {
			k.dead = true
		}
	}
	m.addEpoch()
}

func (m *model) allKeys() []*mkey {
	m.obsMu.Lock()
	defer m.obsMu.Unlock()
	return append([]*mkey(nil), m.keys...)
}

func (m *model) checkOutcome(k *mkey, got optable.Outcome) {
	if k.outcome == nil {
		m.fail(k, "replayed %q but the model sealed nothing", got.Body)
		return
	}
	if got.Status != k.outcome.Status || string(got.Body) != string(k.outcome.Body) || got.Failure != k.outcome.Failure {
		m.fail(k, "replayed %d %q failure=%v, sealed %d %q failure=%v",
			got.Status, got.Body, got.Failure, k.outcome.Status, k.outcome.Body, k.outcome.Failure)
	}
}

// checkObserved compares every outcome a waiter saw with the one sealed
// outcome: sealed never changes.
func (m *model) checkObserved() {
	for k, outs := range m.observed {
		for _, o := range outs {
			m.checkOutcome(k, o)
		}
	}
}
