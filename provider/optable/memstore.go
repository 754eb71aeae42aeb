package optable

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

// memShard maps a key's 64-bit hash to its records. Keying by the hash
// (computed once per call, also to pick the shard) instead of by the two
// strings keeps lookups and map growth cheap; records whose hashes collide
// are chained.
type memShard struct {
	mu   sync.Mutex
	recs map[uint64]*memRecord
	_    [48]byte // keep shards on separate cache lines
}

type memRecord struct {
	rec  Record
	out  Outcome       // rec.Outcome points here once sealed: one allocation less
	done chan struct{} // made by the first waiter; closed when rec leaves Live
	next *memRecord    // another key with the same hash
}

func (sh *memShard) find(h uint64, k Key) *memRecord {
	m := sh.recs[h]
	for m != nil && m.rec.Key != k {
		m = m.next
	}
	return m
}

func (sh *memShard) remove(h uint64, k Key) {
	var prev *memRecord
	for m := sh.recs[h]; m != nil; prev, m = m, m.next {
		if m.rec.Key != k {
			continue
		}
		switch {
		case prev != nil:
			prev.next = m.next
		case m.next != nil:
			sh.recs[h] = m.next
		default:
			delete(sh.recs, h)
		}
		return
	}
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].recs = make(map[uint64]*memRecord)
	}
	return s
}

func (s *MemoryStore) shard(k Key) (*memShard, uint64) {
	sum := maphash.Comparable(s.seed, k)
	return &s.shards[sum%memShards], sum
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, k Key) (Record, error) {
	sh, h := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := sh.find(h, k)
	if m == nil {
		return Record{}, ErrNotFound
	}
	return m.rec, nil
}

// Admit implements Store.
func (s *MemoryStore) Admit(ctx context.Context, a Admission) (Record, bool, error) {
	sh, h := s.shard(a.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := sh.find(h, a.Key)
	if m == nil {
		m = &memRecord{rec: Record{
			Key: a.Key, Method: a.Method, Fingerprint: a.Fingerprint, Policy: a.Policy,
			State: StateLive, Gen: 1, Token: a.Token, ExpiresAt: a.ExpiresAt, UpdatedAt: a.Now,
		}, next: sh.recs[h]}
		sh.recs[h] = m
		return m.rec, true, nil
	}
	r := &m.rec
	if (r.State == StateReleased || r.State == StateIndeterminate) && r.Policy.Idem &&
		r.Method == a.Method && r.Fingerprint == a.Fingerprint && r.ExpiresAt.After(a.Now) {
		r.State, r.Gen, r.Token, r.Outcome = StateLive, r.Gen+1, a.Token, nil
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
	sh, h := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := sh.find(h, k)
	if m == nil {
		return Record{}, ErrNotFound
	}
	if m.rec.State != StateLive || m.rec.Gen != gen {
		return m.rec, ErrNotOwner
	}
	m.rec.State, m.rec.ExpiresAt, m.rec.UpdatedAt = f.To, f.ExpiresAt, f.Now
	if f.To == StateSealed {
		m.out = f.Outcome
		m.rec.Outcome = &m.out
	}
	m.wake()
	return m.rec, nil
}

func checkFinish(f Finish) error {
	switch f.To {
	case StateSealed, StateReleased, StateIndeterminate:
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
	sh, h := s.shard(k)
	sh.mu.Lock()
	m := sh.find(h, k)
	if m == nil {
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
		for _, head := range sh.recs {
			for m := head; m != nil; m = m.next {
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
		var dead []*memRecord
		for h, head := range sh.recs {
			for m := head; m != nil; m = m.next {
				if m.rec.State != StateLive && m.rec.ExpiresAt.Before(cutoff) {
					dead = append(dead, m)
				}
			}
			for _, m := range dead {
				sh.remove(h, m.rec.Key)
				n++
			}
			dead = dead[:0]
		}
		sh.mu.Unlock()
	}
	return n, nil
}
