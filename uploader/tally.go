package uploader

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// tally accumulates a run's report from concurrent workers. It keeps counts
// and rejections only, so its size does not grow with the flight.
type tally struct {
	mu       sync.Mutex
	rep      Report
	progress func(BatchProgress)
	// skipped lists each tile this call will not claim again (rejected in
	// it: the decorator counts the rejection before the next call). Tiles
	// are added before the commit that frees them,
	// so no concurrent worker claims one in between.
	skipped     []string
	skippedSeen map[string]bool
	// lookedUp lists the tiles awaiting a lookup that this call asked the
	// provider about and found not held: the only ones of them its claims
	// may send under a new key (tilestore.Claim.LookedUp).
	lookedUp []string
	// lookedUpAt is when the lookup read the tiles (the database's clock):
	// a failure of one of them recorded later makes its lookup stale.
	lookedUpAt time.Time
	// committedInARow lists the client sequence numbers the provider
	// called committed without their batch's answer and without holding
	// any tile looked up after, since the last batch it answered or tile
	// it held (sequenceCommitted).
	committedInARow []uint64
	// waits are the batches left waiting past the deadline for the
	// provider's advised time, by op ID; onWait is Request.Waiting.
	waits  map[string]Wait
	onWait func(Wait)
	// heldBy is the remaining work other runs held when the run stopped
	// waiting for it (its deadline came); nil when none.
	heldBy *Held
	// gate is the limit on batches in flight of the sends (nil before
	// the first): its limit goes with each settled batch and the report.
	gate gate
}

// setGate records the gate the sends go through.
func (t *tally) setGate(g gate) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gate = g
}

// setHeld records what other runs hold as the run waits (nil: nothing).
func (t *tally) setHeld(b *Held) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b == nil {
		t.heldBy = nil
		return
	}
	c := *b
	c.Holders = slices.Clone(b.Holders)
	t.heldBy = &c
}

func newTally(flightID string, started time.Time, progress func(BatchProgress)) *tally {
	return &tally{rep: Report{FlightID: flightID, Started: started}, progress: progress}
}

func (t *tally) local(rs []tilestore.Rejection) {
	if len(rs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rep.Rejected += len(rs)
	for _, r := range rs {
		t.rep.Rejections = append(t.rep.Rejections, PerTileStatus{
			TileID: r.TileID, Status: TileRejected, Reason: r.Reason, Message: r.Message, OpID: r.OpID})
	}
}

// skip keeps rs's tiles out of this call's later claims. Call it before
// the commit that records the rejections.
func (t *tally) skip(rs []tilestore.Rejection) {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.TileID
	}
	t.skipIDs(ids)
}

// skipIDs keeps the tiles out of this call's later claims.
func (t *tally) skipIDs(ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.skippedSeen == nil {
		t.skippedSeen = map[string]bool{}
	}
	for _, id := range ids {
		if !t.skippedSeen[id] {
			t.skippedSeen[id] = true
			t.skipped = append(t.skipped, id)
		}
	}
}

// unskipped returns the tiles of ts this call may still claim.
func (t *tally) unskipped(ts []tilestore.Tile) []tilestore.Tile {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := ts[:0:0]
	for _, tl := range ts {
		if !t.skippedSeen[tl.ID] {
			out = append(out, tl)
		}
	}
	return out
}

// setLookedUp records the tiles this call's lookup found not held.
func (t *tally) setLookedUp(ids []string, asOf time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lookedUp, t.lookedUpAt = ids, asOf
}

// lookedUpIDs returns the tiles awaiting a lookup that this call may send,
// and when the lookup read them.
func (t *tally) lookedUpIDs() ([]string, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lookedUp[:len(t.lookedUp):len(t.lookedUp)], t.lookedUpAt
}

// skippedIDs returns the tiles this call does not claim again.
func (t *tally) skippedIDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.skipped[:len(t.skipped):len(t.skipped)]
}

// localFailure records a tile left pending because of its blob.
func (t *tally) localFailure(lf LocalFailure) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rep.LocalFailed++
	if len(t.rep.LocalFailures) < maxListedLocalFailures {
		t.rep.LocalFailures = append(t.rep.LocalFailures, lf)
	}
}

// held counts tiles the provider already held when asked: duplicates that
// did not travel again.
func (t *tally) held(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rep.Duplicate += n
}

// exchange counts one request and its resends; a resumed one (a batch
// that waited apart, sent again) is all resends.
func (t *tally) exchange(attempts, timeouts int, refused, resumed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rep.Requests += attempts
	t.rep.Timeouts += timeouts
	if resumed {
		t.rep.Resends += attempts
	} else if attempts > 0 {
		t.rep.FirstAttempts++
		t.rep.Resends += attempts - 1
	}
	if refused {
		t.rep.ResendsRefused++
	}
}

func (t *tally) breakerOpenings(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rep.BreakerOpenings += n
}

// tallyKey carries a call's tally in its context to every exchange of the
// call, GETs included, without threading it through each signature.
type tallyKey struct{}

func withTally(ctx context.Context, t *tally) context.Context {
	return context.WithValue(ctx, tallyKey{}, t)
}

func tallyOf(ctx context.Context) *tally {
	t, _ := ctx.Value(tallyKey{}).(*tally)
	return t
}

// settled records one answered batch and tells the progress callback.
func (t *tally) settled(p BatchProgress, accepted, duplicate int, rejections []tilestore.Rejection, bytes int64) {
	t.mu.Lock()
	t.committedInARow = nil
	t.rep.Batches++
	t.rep.Accepted += accepted
	t.rep.Duplicate += duplicate
	t.rep.Bytes += bytes
	if p.Replayed {
		t.rep.Replayed++
	}
	t.rep.Rejected += len(rejections)
	for _, r := range rejections {
		t.rep.Rejections = append(t.rep.Rejections, PerTileStatus{
			TileID: r.TileID, Status: TileRejected, Reason: r.Reason, Message: r.Message, OpID: r.OpID})
	}
	g := t.gate
	t.mu.Unlock()
	if g != nil {
		p.Concurrency = g.Limit()
	}
	if t.progress != nil {
		t.progress(p)
	}
}

// waiting records a batch left open for the provider's advised time.
func (t *tally) waiting(w Wait) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waits == nil {
		t.waits = map[string]Wait{}
	}
	t.waits[w.OpID] = w
}

// leftWaiting reports whether the batch opID was left open for the
// provider's advised time past the deadline.
func (t *tally) leftWaiting(opID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.waits[opID]
	return ok
}

// announced tells Request.Waiting that a wait starts.
func (t *tally) announced(w Wait) {
	if t.onWait != nil {
		t.onWait(w)
	}
}

func (t *tally) report(finished time.Time, pending int, err error) Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rep
	r.Waiting = nil
	for _, w := range t.waits {
		r.Waiting = append(r.Waiting, w)
	}
	slices.SortFunc(r.Waiting, func(a, b Wait) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		return strings.Compare(a.OpID, b.OpID)
	})
	r.Rejections = append([]PerTileStatus(nil), t.rep.Rejections...)
	r.LocalFailures = append([]LocalFailure(nil), t.rep.LocalFailures...)
	r.Finished = finished
	r.Pending = pending
	if t.gate != nil {
		r.Concurrency = t.gate.Limit()
	}
	if t.heldBy != nil && t.heldBy.Tiles > 0 {
		b := *t.heldBy
		r.Held = &b
	}
	switch {
	case err != nil:
		r.Outcome = OutcomeFailure
	case r.Rejected > 0, r.LocalFailed > 0:
		r.Outcome = OutcomePartial
	default:
		r.Outcome = OutcomeSuccess
	}
	return r
}
