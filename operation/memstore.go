package operation

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// MemoryStore is an in-process Store: sharded maps behind mutexes, and
// waiters parked on channels (never polling). It is durable only for the
// life of the process: a real restart loses every record, so methods that
// declare Persist need PGStore in production. A "restart" in tests is
// Recover on the same instance (the owners died, the table survived).
type MemoryStore struct {
	seed   maphash.Seed
	shards [memShards]memShard
}

var _ Store = (*MemoryStore)(nil)

const memShards = 64

type memShard struct {
	mu   sync.Mutex
	recs map[Key]*memRecord
	_    [40]byte // keep shards on separate cache lines
}

type memRecord struct {
	rec  Record
	done chan struct{} // made by the first waiter; closed when rec leaves Live
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].recs = make(map[Key]*memRecord)
	}
	return s
}

func (s *MemoryStore) shard(k Key) *memShard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(k.Scope)
	h.WriteByte(0)
	h.WriteString(k.OpID)
	return &s.shards[h.Sum64()%memShards]
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, k Key) (Record, error) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, ok := sh.recs[k]
	if !ok {
		return Record{}, ErrNotFound
	}
	return m.rec, nil
}

// Admit implements Store.
func (s *MemoryStore) Admit(ctx context.Context, a Admission) (Record, bool, error) {
	sh := s.shard(a.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, ok := sh.recs[a.Key]
	if !ok {
		m = &memRecord{rec: Record{
			Key: a.Key, Method: a.Method, Fingerprint: a.Fingerprint, Policy: a.Policy,
			State: StateLive, Gen: 1, ExpiresAt: a.ExpiresAt, UpdatedAt: a.Now,
		}}
		sh.recs[a.Key] = m
		return m.rec, true, nil
	}
	r := &m.rec
	if (r.State == StateReleased || r.State == StateIndeterminate) && r.Policy.Idem &&
		r.Method == a.Method && r.Fingerprint == a.Fingerprint && r.ExpiresAt.After(a.Now) {
		r.State, r.Gen, r.Outcome = StateLive, r.Gen+1, nil
		r.ExpiresAt, r.UpdatedAt = a.ExpiresAt, a.Now
		return *r, true, nil
	}
	return *r, false, nil
}

// Finish implements Store.
func (s *MemoryStore) Finish(ctx context.Context, k Key, gen uint64, f Finish) (Record, error) {
	if err := checkFinish(f); err != nil {
		return Record{}, err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, ok := sh.recs[k]
	if !ok {
		return Record{}, ErrNotFound
	}
	if m.rec.State != StateLive || m.rec.Gen != gen {
		return m.rec, ErrNotOwner
	}
	m.rec.State, m.rec.ExpiresAt, m.rec.UpdatedAt = f.To, f.ExpiresAt, f.Now
	if f.To == StateSealed {
		m.rec.Outcome = f.Outcome
	}
	m.wake()
	return m.rec, nil
}

func checkFinish(f Finish) error {
	switch f.To {
	case StateSealed:
		if f.Outcome == nil {
			return fmt.Errorf("finish operation: seal without an outcome")
		}
	case StateReleased, StateIndeterminate:
	default:
		return fmt.Errorf("finish operation: cannot move a live operation to %s", f.To)
	}
	return nil
}

func (m *memRecord) wake() {
	if m.done != nil {
		close(m.done)
		m.done = nil
	}
}

// Wait implements Store.
func (s *MemoryStore) Wait(ctx context.Context, k Key, gen uint64) (Record, error) {
	sh := s.shard(k)
	sh.mu.Lock()
	m, ok := sh.recs[k]
	if !ok {
		sh.mu.Unlock()
		return Record{}, ErrNotFound
	}
	if m.rec.State != StateLive || m.rec.Gen != gen {
		rec := m.rec
		sh.mu.Unlock()
		return rec, nil
	}
	if m.done == nil {
		m.done = make(chan struct{})
	}
	done := m.done
	sh.mu.Unlock()
	select {
	case <-done:
		return s.Get(ctx, k)
	case <-ctx.Done():
		return Record{}, ctx.Err()
	}
}

// Recover implements Store.
func (s *MemoryStore) Recover(ctx context.Context, expiresAt, now time.Time) (int, error) {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, m := range sh.recs {
			if m.rec.State != StateLive {
				continue
			}
			m.rec.State = StateReleased
			if m.rec.Policy.Persist {
				m.rec.State = StateIndeterminate
			}
			m.rec.ExpiresAt, m.rec.UpdatedAt = expiresAt, now
			m.wake()
			n++
		}
		sh.mu.Unlock()
	}
	return n, nil
}

// GC implements Store.
func (s *MemoryStore) GC(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, m := range sh.recs {
			if m.rec.State != StateLive && m.rec.ExpiresAt.Before(cutoff) {
				delete(sh.recs, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n, nil
}
