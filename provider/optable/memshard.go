package optable

import (
	"sync"
	"time"
)

// memShard is one lock's worth of a MemoryStore. Records live by value in
// slots of fixed-size chunks, and index maps a key's 64-bit hash (computed
// once per call, also to pick the shard) to the slot of its record: a map
// of plain integers and chunks of many records are far less for the Go
// garbage collector to trace than a map of pointers to one allocation per
// record, and an admission allocates nothing of its own (now and then a
// chunk, or a larger index).
// Keys whose hashes collide are chained through their slots.
//
// A slot is never reused. Its out is written once, when its record is
// sealed (Sealed is absorbing), and the Record handed out points at it, so
// a replay shares the outcome without copying it; GC only marks slots dead
// (StateAbsent), and when dead slots outnumber live ones compact moves the
// live records to new chunks and drops the old ones, which the Go
// collector frees once no Record points into them. A reader's outcome
// never changes under it.
type memShard struct {
	mu     sync.Mutex
	index  map[uint64]uint32 // hash -> slot of the first record with that hash
	chunks []*memChunk
	used   uint32   // slots handed out; the next record takes slot used
	dead   uint32   // slots whose record GC deleted
	_      [64]byte // keep neighbouring shards' locks off one cache line
}

// memChunkLen is the slots per chunk: a chunk is one allocation of about
// 13 KiB, rare per admission, and a nearly empty store (a chunk in each
// shard) stays under a megabyte.
const memChunkLen = 64

type memChunk [memChunkLen]memSlot

type memSlot struct {
	rec  Record        // rec.Outcome is nil here; record() points it at out
	out  Outcome       // the sealed outcome, written once
	done chan struct{} // made by the first waiter; closed when rec leaves Live
	next uint32        // slot of another record with the same hash, or noSlot
}

const noSlot = ^uint32(0)

func (sh *memShard) init() {
	sh.index = make(map[uint64]uint32)
}

func (sh *memShard) slot(i uint32) *memSlot {
	return &sh.chunks[i/memChunkLen][i%memChunkLen]
}

// record is the slot's record as the Store hands it out.
func (m *memSlot) record() Record {
	r := m.rec
	if r.State == StateSealed {
		r.Outcome = &m.out
	}
	return r
}

// lookup returns k's slot (nil if absent) and the first slot filed under
// h (noSlot if none).
func (sh *memShard) lookup(h uint64, k Key) (*memSlot, uint32) {
	head, ok := sh.index[h]
	if !ok {
		return nil, noSlot
	}
	for i := head; i != noSlot; {
		m := sh.slot(i)
		if m.rec.Key == k {
			return m, head
		}
		i = m.next
	}
	return nil, head
}

// add puts rec in a new slot chained before next and returns the slot's
// number; the caller files it in index.
func (sh *memShard) add(rec Record, next uint32) uint32 {
	if sh.used == uint32(len(sh.chunks))*memChunkLen {
		sh.chunks = append(sh.chunks, new(memChunk))
	}
	i := sh.used
	sh.used++
	m := sh.slot(i)
	m.rec, m.next = rec, next
	return i
}

func (sh *memShard) get(h uint64, k Key) (Record, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, _ := sh.lookup(h, k)
	if m == nil {
		return Record{}, ErrNotFound
	}
	return m.record(), nil
}

func (sh *memShard) admit(h uint64, a Admission) (Record, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, head := sh.lookup(h, a.Key)
	if m == nil {
		rec := Record{
			Key: a.Key, Method: a.Method, Fingerprint: a.Fingerprint, Policy: a.Policy,
			State: StateLive, Gen: 1, Token: a.Token, ExpiresAt: a.ExpiresAt, UpdatedAt: a.Now,
		}
		sh.index[h] = sh.add(rec, head)
		return rec, true
	}
	r := &m.rec
	if (r.State == StateReleased || r.State == StateIndeterminate) && r.Policy.Idem &&
		r.Method == a.Method && r.Fingerprint == a.Fingerprint && r.ExpiresAt.After(a.Now) {
		r.State, r.Gen, r.Token = StateLive, r.Gen+1, a.Token
		r.ExpiresAt, r.UpdatedAt = a.ExpiresAt, a.Now
		return *r, true
	}
	return m.record(), false
}

func (sh *memShard) finish(h uint64, k Key, gen uint64, f Finish) (Record, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, _ := sh.lookup(h, k)
	if m == nil {
		return Record{}, ErrNotFound
	}
	if m.rec.State != StateLive || m.rec.Gen != gen {
		return m.record(), ErrNotOwner
	}
	m.rec.State, m.rec.ExpiresAt, m.rec.UpdatedAt = f.To, f.ExpiresAt, f.Now
	if f.To == StateSealed {
		m.out = f.Outcome
	}
	m.wake()
	return m.record(), nil
}

func (m *memSlot) wake() {
	if m.done != nil {
		close(m.done)
		m.done = nil
	}
}

// waitOn returns the channel closed when k leaves Live at gen, or, when
// it already has, k's record and a nil channel.
func (sh *memShard) waitOn(h uint64, k Key, gen uint64) (Record, <-chan struct{}, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, _ := sh.lookup(h, k)
	if m == nil {
		return Record{}, nil, ErrNotFound
	}
	if m.rec.State != StateLive || m.rec.Gen != gen {
		return m.record(), nil, nil
	}
	if m.done == nil {
		m.done = make(chan struct{})
	}
	return Record{}, m.done, nil
}

func (sh *memShard) recover(expiresAt, now time.Time) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for i := uint32(0); i < sh.used; i++ {
		m := sh.slot(i)
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
	return n
}

// collect deletes the non-Live records that expired before cutoff and
// returns how many.
func (sh *memShard) collect(cutoff time.Time) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for h, head := range sh.index {
		prev := noSlot
		for i := head; i != noSlot; {
			m := sh.slot(i)
			next := m.next
			if m.rec.State == StateLive || !m.rec.ExpiresAt.Before(cutoff) {
				prev, i = i, next
				continue
			}
			switch {
			case prev != noSlot:
				sh.slot(prev).next = next
			case next != noSlot:
				sh.index[h] = next
			default:
				delete(sh.index, h)
			}
			// out stays: a Record handed out may point at it.
			m.rec, m.next = Record{}, noSlot
			sh.dead++
			n++
			i = next
		}
	}
	// Dead slots keep their outcomes (a Record handed out may point at
	// them) until a compaction drops their chunks: one runs once they
	// outnumber the live ones, or once nothing is live, so that a store
	// whose traffic stopped keeps no expired answer.
	if sh.dead > 0 && (sh.dead == sh.used || sh.dead >= memChunkLen && sh.dead >= sh.used-sh.dead) {
		sh.compact()
	}
	return n
}

// compact moves the live records into new chunks and a new index, sized
// for them, and drops the old ones. Its cost, one copy of each live
// record, is paid for by at least as many deletions since the last one.
func (sh *memShard) compact() {
	index, chunks := sh.index, sh.chunks
	sh.index, sh.chunks, sh.used, sh.dead = make(map[uint64]uint32, len(index)), nil, 0, 0
	for h, head := range index {
		to := noSlot
		for i := head; i != noSlot; {
			m := &chunks[i/memChunkLen][i%memChunkLen]
			to = sh.add(m.rec, to)
			c := sh.slot(to)
			c.out, c.done = m.out, m.done
			i = m.next
		}
		sh.index[h] = to
	}
}
