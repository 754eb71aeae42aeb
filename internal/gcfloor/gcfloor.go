// Package gcfloor lets a process's heap grow by at least a floor between
// garbage collections, so that a small heap is not collected every few
// megabytes allocated.
//
// Go collects when the heap has grown by GOGC percent (100) of what the
// last collection left live, and at 4 MiB at the least. A process whose
// live heap is a few megabytes but that allocates quickly (upload-pending
// with small tiles: each batch's rows, body and answer are garbage once it
// is settled) then collects every few megabytes allocated, and each collection
// costs the same fixed work whatever it frees. Keep raises the percent
// after each collection so that the next comes after at least the floor
// has been allocated, up to maxPercent of the live heap; a heap of at
// least the floor grows by Go's default. The process's peak heap grows by
// at most the floor. An operator's GOGC is left alone.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

const (
	// defaultPercent is Go's GOGC default, the least Keep sets.
	defaultPercent = 100
	// maxPercent bounds the growth of a tiny heap to five times what is
	// live: the collections are then rare enough that their fixed cost
	// is small beside the allocation itself.
	maxPercent = 400
)

// percent is the GC percent that lets a heap of live bytes grow by the
// floor before the next collection, within [defaultPercent, maxPercent].
func percent(live, floor uint64) int {
	if live == 0 {
		return maxPercent
	}
	p := floor * 100 / live
	switch {
	case p < defaultPercent:
		return defaultPercent
	case p > maxPercent:
		return maxPercent
	}
	return int(p)
}

// Keep sets the GC percent for a heap that may grow by floor bytes, and
// sets it again after each collection from the live heap that collection
// left, until stop, which puts back the percent there was before. With
// GOGC set in the environment (getenv) it changes nothing. Call stop once.
func Keep(floor uint64, getenv func(string) string) (stop func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	h := &hook{floor: floor, last: maxPercent}
	h.sample[0].Name = "/gc/heap/live:bytes"
	h.before = debug.SetGCPercent(maxPercent) // the live heap is not known before the first collection
	h.arm()
	return h.stop
}

// hook is Keep's state, read again after each collection.
type hook struct {
	floor uint64
	// mu orders a collection's adjustment and stop: none runs after stop.
	mu      sync.Mutex
	stopped bool
	before  int // the percent before Keep
	last    int // the percent set last
	sample  [1]metrics.Sample
}

// sentinel is an object only the next collection frees: its cleanup
// runs once that collection is over. It holds a pointer so that it is
// its own allocation (the tiny allocator packs pointer-free objects
// together, and one of them lives as long as its neighbours).
type sentinel struct{ _ *byte }

// arm asks to be called after the next collection.
func (h *hook) arm() {
	runtime.AddCleanup(&sentinel{}, (*hook).collected, h)
}

// collected sets the percent from the live heap the last collection
// left, and arms for the next, unless stopped.
func (h *hook) collected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	metrics.Read(h.sample[:])
	if h.sample[0].Value.Kind() == metrics.KindUint64 {
		if p := percent(h.sample[0].Value.Uint64(), h.floor); p != h.last {
			debug.SetGCPercent(p)
			h.last = p
		}
	}
	h.arm()
}

func (h *hook) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	h.stopped = true
	debug.SetGCPercent(h.before)
}
