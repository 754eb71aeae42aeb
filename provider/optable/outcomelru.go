package optable

import (
	"container/list"
	"sync"
	"time"
)

// outcomeLRU caches committed batch outcomes by (client, sequence): at most
// size entries, each for at most ttl (the reference provider keeps 10,000 entries for 5 minutes).
type outcomeLRU struct {
	mu    sync.Mutex
	size  int
	ttl   time.Duration
	now   func() time.Time
	order *list.List // front = newest
	items map[lruKey]*list.Element
}

type lruKey struct {
	k seqKey
	n uint64
}

type lruEntry struct {
	key lruKey
	out Outcome
	at  time.Time
}

func newOutcomeLRU(size int, ttl time.Duration, now func() time.Time) *outcomeLRU {
	return &outcomeLRU{size: size, ttl: ttl, now: now, order: list.New(), items: map[lruKey]*list.Element{}}
}

func (c *outcomeLRU) get(k seqKey, n uint64) (Outcome, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[lruKey{k, n}]
	if !ok {
		return Outcome{}, false
	}
	ent := e.Value.(*lruEntry)
	if c.now().Sub(ent.at) > c.ttl {
		c.order.Remove(e)
		delete(c.items, ent.key)
		return Outcome{}, false
	}
	c.order.MoveToFront(e)
	return ent.out, true
}

func (c *outcomeLRU) put(k seqKey, n uint64, out Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := lruKey{k, n}
	if e, ok := c.items[key]; ok {
		c.order.Remove(e)
	}
	c.items[key] = c.order.PushFront(&lruEntry{key: key, out: out, at: c.now()})
	for c.order.Len() > c.size {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*lruEntry).key)
	}
}
