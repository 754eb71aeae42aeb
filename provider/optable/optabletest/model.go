package optabletest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/optable"
)

// RunModel drives a store through random interleavings of admit,
// duplicate, conflict, seal, fail, release, abandon, wait,
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
	pol     optable.Policy
	state   optable.State
	gen     uint64
	outcome *optable.Outcome
	dead    bool // expired: must answer ErrExpired forever
}

type pending struct {
	k   *mkey
	tk  *optable.Ticket
	gen uint64
}

type model struct {
	t     *testing.T
	h     Harness
	clock *Clock

	world sync.RWMutex // write-held by crash and expire
	store optable.Store
	table *optable.Table
	epoch int              // guarded by obsMu
	keys  []*mkey          // every key of every epoch
	mint  map[string]int64 // op ID -> epoch start (unix nanos), for IssuedAt

	waiters  sync.WaitGroup
	obsMu    sync.Mutex
	observed map[*mkey][]optable.Outcome
}

func newModel(t *testing.T, h Harness) *model {
	m := &model{t: t, h: h, clock: NewClock(), mint: map[string]int64{}, observed: map[*mkey][]optable.Outcome{}}
	m.store = h.New(t)
	m.table = m.newTable(m.store)
	m.addEpoch()
	return m
}

func (m *model) newTable(s optable.Store) *optable.Table {
	return optable.NewTable(s, optable.TableOptions{
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
			pol: optable.Policy{Persist: i&1 == 1, Idem: i&2 == 2}}
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
func (m *model) withKey(k *mkey, f func(tbl *optable.Table)) {
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
