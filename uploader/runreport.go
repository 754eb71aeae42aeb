package uploader

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// runReport accumulates one UploadPendingTiles call's Report from its
// concurrent workers, its dueBatches and the sender: the counts, the
// rejections and local failures, the batches left waiting, what other runs
// held, the gate's limit. It tells the caller's callbacks (Request.Progress
// with each settled batch, Request.Waiting with each wait) as they happen.
// It keeps counts and short lists only, so its size does not grow with the
// flight. Nothing in it decides what a claim takes: that is claimState.
type runReport struct {
	mu       sync.Mutex
	rep      Report
	progress func(BatchProgress)
	// waits are the batches left waiting past the deadline for the
	// provider's advised time, by op ID; onWait is Request.Waiting.
	waits  map[string]Wait
	onWait func(Wait)
	// heldBy is the remaining work other runs held when the run stopped
	// waiting for it (its deadline came); nil when none.
	heldBy *Held
	// behind: stoppedBehindWaiting.
	behind bool
	// gate is the limit on batches in flight of the sends (nil before
	// the first): its limit goes with each settled batch and the report.
	gate gate
}

// newRunReport starts the report of a call for flightID begun at started;
// progress and onWait are Request.Progress and Request.Waiting (nil: not
// told).
func newRunReport(flightID string, started time.Time, progress func(BatchProgress), onWait func(Wait)) *runReport {
	return &runReport{rep: Report{FlightID: flightID, Started: started}, progress: progress, onWait: onWait}
}

// setGate records the gate the sends go through.
func (r *runReport) setGate(g gate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate = g
}

// setHeld records what other runs hold as the run waits (nil: nothing).
func (r *runReport) setHeld(b *Held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b == nil {
		r.heldBy = nil
		return
	}
	c := *b
	c.Holders = slices.Clone(b.Holders)
	r.heldBy = &c
}

// addRejections counts and lists rs; r.mu is held.
func (r *runReport) addRejections(rs []tilestore.Rejection) {
	r.rep.Rejected += len(rs)
	for _, rj := range rs {
		r.rep.Rejections = append(r.rep.Rejections, PerTileStatus{
			TileID: rj.TileID, Status: TileRejected, Reason: rj.Reason, Message: rj.Message, OpID: rj.OpID})
	}
}

// local records the rejections a claim made without sending (pick's:
// tiles no batch may carry).
func (r *runReport) local(rs []tilestore.Rejection) {
	if len(rs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addRejections(rs)
}

// localFailure records a tile left pending because of its blob.
func (r *runReport) localFailure(lf LocalFailure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.LocalFailed++
	if len(r.rep.LocalFailures) < maxListedLocalFailures {
		r.rep.LocalFailures = append(r.rep.LocalFailures, lf)
	}
}

// held counts tiles the provider already held when asked: duplicates that
// did not travel again.
func (r *runReport) held(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Duplicate += n
}

// exchange counts one request and its resends (the sender's doExchange
// calls it for each exchange of the call, GETs included); a resumed one (a
// batch that waited apart, sent again) is all resends.
func (r *runReport) exchange(attempts, timeouts int, refused, resumed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Requests += attempts
	r.rep.Timeouts += timeouts
	if resumed {
		r.rep.Resends += attempts
	} else if attempts > 0 {
		r.rep.FirstAttempts++
		r.rep.Resends += attempts - 1
	}
	if refused {
		r.rep.ResendsRefused++
	}
}

// breakerOpenings counts the times the circuit breaker opened during the
// call.
func (r *runReport) breakerOpenings(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.BreakerOpenings += n
}

// settled records one answered batch and tells the progress callback.
func (r *runReport) settled(p BatchProgress, accepted, duplicate int, rejections []tilestore.Rejection, bytes int64) {
	r.mu.Lock()
	r.rep.Batches++
	r.rep.Accepted += accepted
	r.rep.Duplicate += duplicate
	r.rep.Bytes += bytes
	if p.Replayed {
		r.rep.Replayed++
	}
	r.addRejections(rejections)
	g := r.gate
	r.mu.Unlock()
	if g != nil {
		p.Concurrency = g.Limit()
	}
	if r.progress != nil {
		r.progress(p)
	}
}

// waiting records a batch left open for the provider's advised time.
func (r *runReport) waiting(w Wait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waits == nil {
		r.waits = map[string]Wait{}
	}
	r.waits[w.OpID] = w
}

// stoppedBehindWaiting notes that a sequenced worker stopped behind a
// batch left open for the provider's advised time past the deadline
// (Report.WaitsBehind).
func (r *runReport) stoppedBehindWaiting() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.behind = true
}

// leftWaiting reports whether the batch opID was left open for the
// provider's advised time past the deadline.
func (r *runReport) leftWaiting(opID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.waits[opID]
	return ok
}

// announced tells Request.Waiting that a wait starts.
func (r *runReport) announced(w Wait) {
	if r.onWait != nil {
		r.onWait(w)
	}
}

// report is the call's Report as it ends at finished, with pending tiles
// left and err (nil: no run-level error) deciding its outcome.
func (r *runReport) report(finished time.Time, pending int, err error) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.rep
	out.Waiting = nil
	for _, w := range r.waits {
		out.Waiting = append(out.Waiting, w)
	}
	slices.SortFunc(out.Waiting, func(a, b Wait) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		return strings.Compare(a.OpID, b.OpID)
	})
	out.Rejections = append([]PerTileStatus(nil), r.rep.Rejections...)
	out.LocalFailures = append([]LocalFailure(nil), r.rep.LocalFailures...)
	out.Finished = finished
	out.Pending = pending
	out.WaitsBehind = r.behind
	if r.gate != nil {
		out.Concurrency = r.gate.Limit()
	}
	if r.heldBy != nil && r.heldBy.Tiles > 0 {
		b := *r.heldBy
		out.Held = &b
	}
	switch {
	case err != nil:
		out.Outcome = OutcomeFailure
	case out.Rejected > 0, out.LocalFailed > 0:
		out.Outcome = OutcomePartial
	default:
		out.Outcome = OutcomeSuccess
	}
	return out
}
