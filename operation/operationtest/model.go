package operationtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// RunModel drives a store through random interleavings of admit,
// duplicate, conflict, seal, fail, release, abandon, cancel, wait,
// crash-and-restart and expire from several goroutines, and checks every
// answer against a reference model. Operations on one key are serialised
// by a per-key lock so the model can predict each answer exactly; keys run
// concurrently, and waiters attach to live operations outside the locks.
//
// Invariants: at most one execution owner per ID (owners get exactly the
// predicted generation; waiters never become owners); a sealed outcome
// never changes; a conflict never executes; an expired ID never executes.
//
// steps is the total across goroutines; OPERATION_MODEL_STEPS overrides it
// and OPERATION_MODEL_SEED fixes the seed (it is logged on every run).
func RunModel(t *testing.T, h Harness, steps int) {
	if s, err := strconv.Atoi(os.Getenv("OPERATION_MODEL_STEPS")); err == nil && s > 0 {
		steps = s
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("OPERATION_MODEL_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("model: %d steps, seed %d (rerun with OPERATION_MODEL_SEED=%d)", steps, seed, seed)
	m := newModel(t, h)
	const workers = 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.worker(rand.New(rand.NewPCG(seed, uint64(w))), steps/workers)
		}()
	}
	wg.Wait()
	m.waiters.Wait()
	m.checkObserved()
}

const modelKeysPerEpoch = 8

type mkey struct {
	mu      sync.Mutex
	id      string
	pol     operation.Policy
	state   operation.State
	gen     uint64
	outcome *operation.Outcome
	dead    bool // expired: must answer ErrExpired forever
}

type pending struct {
	k   *mkey
	tk  *operation.Ticket
	gen uint64
}

type model struct {
	t     *testing.T
	h     Harness
	clock *Clock

	world sync.RWMutex // write-held by crash and expire
	store operation.Store
	table *operation.Table
	epoch int              // guarded by obsMu
	keys  []*mkey          // every key of every epoch
	mint  map[string]int64 // op ID -> epoch start (unix nanos), for IssuedAt

	waiters  sync.WaitGroup
	obsMu    sync.Mutex
	observed map[*mkey][]operation.Outcome
}

func newModel(t *testing.T, h Harness) *model {
	m := &model{t: t, h: h, clock: NewClock(), mint: map[string]int64{}, observed: map[*mkey][]operation.Outcome{}}
	m.store = h.New(t)
	m.table = m.newTable(m.store)
	m.addEpoch()
	return m
}

func (m *model) newTable(s operation.Store) *operation.Table {
	return operation.NewTable(s, operation.TableOptions{
		Retention: retention, GCMargin: margin, Now: m.clock.Now,
		IssuedAt: func(id string) (time.Time, bool) {
			m.obsMu.Lock()
			defer m.obsMu.Unlock()
			ns, ok := m.mint[id]
			return time.Unix(0, ns), ok
		},
	})
}

// addEpoch mints a fresh set of keys; called at start and under the world
// write lock.
func (m *model) addEpoch() {
	m.obsMu.Lock()
	defer m.obsMu.Unlock()
	if len(m.keys) > 0 {
		m.epoch++
	}
	for i := range modelKeysPerEpoch {
		k := &mkey{id: fmt.Sprintf("model-key-%02d-epoch-%03d", i, m.epoch),
			pol: operation.Policy{Persist: i&1 == 1, Idem: i&2 == 2}}
		m.keys = append(m.keys, k)
		m.mint[k.id] = m.clock.Now().UnixNano()
	}
}

func (m *model) pickKey(rng *rand.Rand) *mkey {
	m.obsMu.Lock()
	defer m.obsMu.Unlock()
	if rng.IntN(10) == 0 || m.epoch == 0 {
		return m.keys[rng.IntN(len(m.keys))] // any epoch, often expired ones
	}
	cur := m.keys[len(m.keys)-modelKeysPerEpoch:]
	return cur[rng.IntN(len(cur))]
}

func (m *model) worker(rng *rand.Rand, steps int) {
	var mine []pending
	for step := 0; step < steps && !m.t.Failed(); step++ {
		switch r := rng.IntN(100); {
		case r < 2:
			m.crash()
		case r < 3:
			m.expire(rng.IntN(2) == 0)
		case r < 30:
			if p, ok := m.begin(m.pickKey(rng)); ok {
				mine = append(mine, p)
			}
		case r < 38:
			m.conflict(m.pickKey(rng), rng.IntN(2) == 0)
		case r < 45:
			m.cancel(m.pickKey(rng))
		case r < 52:
			m.attach(m.pickKey(rng), time.Duration(rng.IntN(3))*time.Millisecond)
		case r < 56:
			m.lookup(m.pickKey(rng))
		default:
			if len(mine) == 0 {
				continue
			}
			i := rng.IntN(len(mine))
			p := mine[i]
			mine = append(mine[:i], mine[i+1:]...)
			switch rng.IntN(4) {
			case 0:
				m.release(p)
			case 1:
				m.abandon(p)
			default:
				out := outcome(200+rng.IntN(2)*222, fmt.Sprintf("out-%d-%d", p.gen, rng.IntN(1000)), rng.IntN(3) == 0)
				m.seal(p, out)
			}
		}
	}
}

// withKey runs f holding the world read lock and k's lock.
func (m *model) withKey(k *mkey, f func(tbl *operation.Table)) {
	m.world.RLock()
	defer m.world.RUnlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	f(m.table)
}

func (m *model) fail(k *mkey, format string, args ...any) {
	m.t.Errorf("key %s (%s, model state %s gen %d dead %v): %s", k.id, polName(k.pol), k.state, k.gen, k.dead,
		fmt.Sprintf(format, args...))
}

func (m *model) req(k *mkey) operation.Request {
	return operation.Request{Scope: "model", OpID: k.id, Method: "m", Fingerprint: "fp", Policy: k.pol}
}

func (m *model) begin(k *mkey) (p pending, owned bool) {
	m.withKey(k, func(tbl *operation.Table) {
		tk, err := tbl.Begin(context.Background(), m.req(k))
		switch {
		case k.dead:
			if !errors.Is(err, operation.ErrExpired) {
				m.fail(k, "begin of expired ID: ticket %v err %v, want ErrExpired", tk, err)
			}
		case k.state == operation.StateAbsent ||
			(k.pol.Idem && (k.state == operation.StateReleased || k.state == operation.StateIndeterminate)):
			if err != nil || !tk.Owner() || tk.Record().Gen != k.gen+1 {
				m.fail(k, "begin: ticket %v err %v, want owner gen %d", tk, err, k.gen+1)
				return
			}
			k.state, k.gen = operation.StateLive, k.gen+1
			p, owned = pending{k: k, tk: tk, gen: k.gen}, true
		case k.state == operation.StateLive:
			if !errors.Is(err, operation.ErrProcessing) {
				m.fail(k, "duplicate of live: ticket %v err %v, want ErrProcessing", tk, err)
			}
		case k.state == operation.StateSealed:
			if err != nil || tk.Owner() {
				m.fail(k, "duplicate of sealed: ticket %v err %v, want replay", tk, err)
				return
			}
			m.checkOutcome(k, tk.Outcome())
		default: // released or indeterminate, non-idem
			var ie *operation.IndeterminateError
			if !errors.As(err, &ie) || ie.From != k.state {
				m.fail(k, "duplicate of %s non-idem: ticket %v err %v, want IndeterminateError", k.state, tk, err)
			}
		}
	})
	return p, owned
}

func (m *model) conflict(k *mkey, otherMethod bool) {
	m.withKey(k, func(tbl *operation.Table) {
		if k.state == operation.StateAbsent && !k.dead {
			return // an absent ID has no binding yet: it would be admitted
		}
		r := m.req(k)
		if otherMethod {
			r.Method = "other"
		} else {
			r.Fingerprint = "other"
		}
		tk, err := tbl.Begin(context.Background(), r)
		want := operation.ErrConflict
		if k.dead {
			want = operation.ErrExpired
		}
		if !errors.Is(err, want) {
			m.fail(k, "conflicting begin: ticket %v err %v, want %v", tk, err, want)
		}
	})
}

func (m *model) finishWant(p pending) bool {
	return p.k.state == operation.StateLive && p.k.gen == p.gen
}

func (m *model) seal(p pending, out operation.Outcome) {
	k := p.k
	m.withKey(k, func(*operation.Table) {
		_, err := p.tk.Seal(context.Background(), out)
		if !m.finishWant(p) {
			if !errors.Is(err, operation.ErrNotOwner) {
				m.fail(k, "seal by fenced owner gen %d: %v, want ErrNotOwner", p.gen, err)
			}
			return
		}
		if err != nil {
			m.fail(k, "seal by owner gen %d: %v", p.gen, err)
			return
		}
		k.state, k.outcome = operation.StateSealed, &out
	})
}

func (m *model) release(p pending) {
	k := p.k
	m.withKey(k, func(*operation.Table) {
		err := p.tk.Release(context.Background())
		switch {
		case k.pol.Persist:
			if err != nil {
				m.fail(k, "release of persist op: %v, want nil (detach only)", err)
			}
		case !m.finishWant(p):
			if !errors.Is(err, operation.ErrNotOwner) {
				m.fail(k, "release by fenced owner: %v, want ErrNotOwner", err)
			}
		case err != nil:
			m.fail(k, "release: %v", err)
		default:
			k.state = operation.StateReleased
		}
	})
}

func (m *model) abandon(p pending) {
	k := p.k
	m.withKey(k, func(*operation.Table) {
		err := p.tk.Abandon(context.Background())
		switch {
		case !m.finishWant(p):
			if !errors.Is(err, operation.ErrNotOwner) {
				m.fail(k, "abandon by fenced owner: %v, want ErrNotOwner", err)
			}
		case err != nil:
			m.fail(k, "abandon: %v", err)
		case k.pol.Persist:
			k.state = operation.StateIndeterminate
		default:
			k.state = operation.StateReleased
		}
	})
}

func (m *model) cancel(k *mkey) {
	m.withKey(k, func(tbl *operation.Table) {
		rec, err := tbl.Cancel(context.Background(), operation.Key{Scope: "model", OpID: k.id})
		if k.state == operation.StateAbsent || (k.dead && errors.Is(err, operation.ErrNotFound)) {
			if !errors.Is(err, operation.ErrNotFound) {
				m.fail(k, "cancel of absent: %v, want ErrNotFound", err)
			}
			return
		}
		if err != nil {
			m.fail(k, "cancel: %v", err)
			return
		}
		if k.state == operation.StateLive && !k.pol.Persist {
			k.state = operation.StateReleased
		}
		if rec.State != k.state {
			m.fail(k, "after cancel: store %s", rec.State)
		}
	})
}

func (m *model) lookup(k *mkey) {
	m.withKey(k, func(tbl *operation.Table) {
		st, _, err := tbl.Lookup(context.Background(), operation.Key{Scope: "model", OpID: k.id})
		want := k.state
		if k.dead && k.state != operation.StateLive {
			want = operation.StateExpired
		}
		if err != nil || st != want {
			m.fail(k, "lookup: %s %v, want %s", st, err, want)
		}
	})
}

// attach starts a duplicate that waits for a live non-idem operation
// outside the key lock, racing the owner's seal, cancels and other
// duplicates. A non-idem ID that exists is never admitted again, so the
// waiter must never become an owner.
func (m *model) attach(k *mkey, wait time.Duration) {
	m.withKey(k, func(tbl *operation.Table) {
		if k.pol.Idem || k.state == operation.StateAbsent || k.dead {
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
			case errors.Is(err, operation.ErrProcessing), operation.IsIndeterminate(err),
				// An expire may run between the launch and this Begin.
				errors.Is(err, operation.ErrExpired):
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
		if k.state == operation.StateLive {
			k.state = operation.StateReleased
			if k.pol.Persist {
				k.state = operation.StateIndeterminate
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
		if k.state != operation.StateLive {
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

func (m *model) checkOutcome(k *mkey, got operation.Outcome) {
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
