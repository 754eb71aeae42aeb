package optable

import (
	"context"
	"fmt"
	"hash/maphash"
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

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].init()
	}
	return s
}

// shard picks k's shard and returns the hash the shard files k under.
func (s *MemoryStore) shard(k Key) (*memShard, uint64) {
	sum := maphash.Comparable(s.seed, k)
	return &s.shards[sum%memShards], sum
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, k Key) (Record, error) {
	sh, h := s.shard(k)
	return sh.get(h, k)
}

// Admit implements Store.
func (s *MemoryStore) Admit(ctx context.Context, a Admission) (Record, bool, error) {
	sh, h := s.shard(a.Key)
	rec, owner := sh.admit(h, a)
	return rec, owner, nil
}

// Finish implements Store.
func (s *MemoryStore) Finish(ctx context.Context, k Key, gen uint64, f Finish) (Record, error) {
	if err := checkFinish(f); err != nil {
		return Record{}, err
	}
	sh, h := s.shard(k)
	return sh.finish(h, k, gen, f)
}

func checkFinish(f Finish) error {
	switch f.To {
	case StateSealed, StateReleased, StateIndeterminate:
	default:
		return fmt.Errorf("finish operation: cannot move a live operation to %s", f.To)
	}
	return nil
}

// Wait implements Store.
func (s *MemoryStore) Wait(ctx context.Context, k Key, gen uint64) (Record, error) {
	sh, h := s.shard(k)
	rec, done, err := sh.waitOn(h, k, gen)
	if done == nil || err != nil {
		return rec, err
	}
	select {
	case <-done:
		return sh.get(h, k)
	case <-ctx.Done():
		return Record{}, ctx.Err()
	}
}

// Recover implements Store.
func (s *MemoryStore) Recover(ctx context.Context, expiresAt, now time.Time) (int, error) {
	n := 0
	for i := range s.shards {
		n += s.shards[i].recover(expiresAt, now)
	}
	return n, nil
}

// GC implements Store.
func (s *MemoryStore) GC(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	for i := range s.shards {
		n += s.shards[i].collect(cutoff)
	}
	return n, nil
}
