package uploader

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// This file decides when a run's remaining work is blocked until a time it
// cannot change, and says so: the batches that wait for the provider's
// advised time (the report's Waiting list, the announcement of each wait,
// the settling of batches an earlier run left waiting), and
// Report.Blocked, the one place that decides whether a call ends
// for blocked work (the provider's advice, or other runs' batches: see
// blocked.go), which the retry decorator and the summary read, with
// endedBlocked, which says when the deadline that ended a call's sends
// cut only such work.

// WaitReason says why work waits.
type WaitReason string

// WaitProviderAdvice: the provider asked the batch to wait (Retry-After in
// seconds or as an HTTP date, or the retry extension's "after"); the
// batch's not-before is journaled with it (Store.DeferBatch).
const WaitProviderAdvice WaitReason = "provider_advice"

// MaxAdvisedWait is the longest wait a provider's advice is kept for. A
// longer one (a Unix time sent as seconds, a typo in minutes) is cut to it
// so that no answer strands a batch for years; a provider that still
// wants more says so again when the batch goes after it.
const MaxAdvisedWait = time.Hour

// Wait is remaining work that may not go on before Until.
type Wait struct {
	Reason WaitReason `json:"reason"`
	OpID   string     `json:"op_id,omitempty"` // the batch that waits
	Tiles  int        `json:"tiles"`
	// Until is when the work may go on: for provider advice, the batch's
	// journaled not-before (the database's clock).
	Until time.Time `json:"until"`
	// Detail says who asked for the wait and how ("503 UNAVAILABLE asked
	// for 1m0s").
	Detail string `json:"detail,omitempty"`
	// PastDeadline: this run does not send the batch again, and it stays
	// open for a later run: Until comes after the run's deadline, or the
	// deadline came before the batch's resend went on the wire (while it
	// waited for Until, was read again from the journal, waited for a slot
	// of the limit on batches in flight, for the circuit breaker's
	// cool-down or the pacer, or was journaled before the send).
	PastDeadline bool `json:"past_deadline"`
}

// Blocked reports the earliest time the work a report leaves blocked may
// go on (zero when none is), and whether the call ends for it rather than
// retry: the call waited for other runs' batches until its deadline
// (Held), or all of the flight's pending work waits (every pending tile is
// in a batch waiting for the provider's advised time, or was left for its
// bad cached blob, or, in a strict client sequence, stopped behind a
// waiting batch holding the client's next number). Such a run ends (exit 3, next_retry_at = until)
// instead of retrying what cannot go yet.
func (r Report) Blocked() (until time.Time, stop bool) {
	tiles := 0
	for _, w := range r.Waiting {
		tiles += w.Tiles
		if until.IsZero() || w.Until.Before(until) {
			until = w.Until
		}
	}
	if h := r.Held; h != nil && h.Tiles > 0 {
		if until.IsZero() || h.Until.Before(until) {
			until = h.Until
		}
		return until, true
	}
	if r.WaitsBehind {
		return until, tiles > 0 && r.Pending > 0
	}
	return until, tiles > 0 && r.Pending > 0 && r.Pending <= tiles+r.LocalFailed
}

// endedBlocked reports whether err, which ended a call whose report would
// be out without it, is only the call's deadline cutting work that all
// waits past it: the call then ends blocked (no error, NextRetryAt), as
// one whose sends ended first does. The deadline may end a call's sends
// while they wait for nothing they could still do: a worker's last claim
// waits for a slot that due batches, ahead of it, keep until the deadline,
// and would have found nothing to claim. It is so when out is Blocked and
// every tile still pending is in a batch listed as waiting, in other runs'
// batches (Held), or left for its bad blob, each counted once, or waits
// behind a waiting batch holding the client's next number (WaitsBehind).
// A tile nobody claimed, or one in a batch the deadline cut on the wire,
// is work the deadline cut: err stands. Where the counts cannot tell
// (a tile left for its blob may be in Held), err stands too.
func endedBlocked(ctx context.Context, err error, out Report) bool {
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false
	}
	if _, stop := out.Blocked(); !stop {
		return false
	}
	// Each tile counts once. The waiting batches are this run's, apart
	// from other runs' batches and from the tiles left for their blob
	// (those left every batch). A tile left for its blob may since have
	// been claimed by another run, and so sit in Held too, which is a
	// look at other runs' batches, not a list of tiles: the two may
	// overlap, and only the larger counts.
	accounted := out.LocalFailed
	if out.Held != nil {
		accounted = max(accounted, out.Held.Tiles)
	}
	for _, w := range out.Waiting {
		accounted += w.Tiles
	}
	return out.WaitsBehind || out.Pending <= accounted
}

// errWaiting is matched by *waitingError.
var errWaiting = errors.New("batch waits for the provider's advised time")

// waitingError: the provider advised the batch to wait, and the exchange
// did not wait for it: an unsequenced batch waits apart for every wait
// the answer names, and a sequenced one when the wait goes past the cap on
// one wait or the run's deadline, or its resends are spent. Its not-before is journaled and it stays open. It
// does not end the run: the caller hands it to the call's dueBatches.
type waitingError struct {
	w    Wait
	left time.Duration // from when the answer came until the not-before
	// past is what the batch's next exchange counts on from.
	past carried
}

// carried is what a batch's exchanges in one upload call (of one process)
// leave to its next exchange in that call, after a wait apart: sent is
// every send (exchange.prior: a provider's max_attempts, the contract
// table's limits and an exponential advice count them), own the resends
// tilectl decided on its own after an answer that named no wait
// (exchange.priorOwn: MaxResends and the transport backoff count them).
// Both start from none in each call: a batch adopted from the journal,
// after a crash say, gets its full resends again, or it might never be
// settled. spare: the wait apart spares the resend after it the retry
// budget (verdict.sparesBudget).
type carried struct {
	sent, own int
	spare     bool
}

func (e *waitingError) Error() string {
	return fmt.Sprintf("batch %s waits until %s as the provider advised (%s)", e.w.OpID, e.w.Until.Format(time.RFC3339), e.w.Detail)
}

func (e *waitingError) Is(target error) bool { return target == errWaiting }

// adviceDetail says what asked for a wait, for logs and the report.
func adviceDetail(v verdict, journaled time.Duration) string {
	s := fmt.Sprintf("%d %s asked for %s", v.status, v.code, v.floor.Round(time.Millisecond))
	switch {
	case journaled < v.floor:
		s += fmt.Sprintf(", kept for %s at most", journaled)
	case journaled > v.floor:
		s += fmt.Sprintf(", backing off (%s) to %s", v.strategy, journaled.Round(time.Millisecond))
	}
	return s
}

// fitsDeadline reports whether a wait of d from now ends before ctx's
// deadline, as bound decides it.
func (u *Client) fitsDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || d < dl.Sub(u.now())
}

// announce says, when a wait starts, what waits and until when: a log
// line, and Request.Waiting (through rep, the call's report; nil: none) for
// the status line.
func (u *Client) announce(rep *runReport, w Wait) {
	e, msg := u.log.Info(), "waiting until the provider's advised time before sending the batch again"
	if w.PastDeadline {
		e, msg = u.log.Warn(), "the provider's advised time for the batch comes after this run's deadline: "+
			"it stays open, and no run sends it before then"
	}
	e.Str("op_id", w.OpID).Int("tiles", w.Tiles).Time("until", w.Until).Str("advice", w.Detail).Msg(msg)
	if rep != nil {
		rep.announced(w)
	}
}

// splitWaiting returns the open batches whose advised time has not come
// (by the database's clock, when they were read) apart from the others.
func splitWaiting(open []tilestore.Batch) (now, waiting []tilestore.Batch) {
	for _, b := range open {
		if b.NotBefore != nil && b.NotBeforeIn > 0 {
			waiting = append(waiting, b)
		} else {
			now = append(now, b)
		}
	}
	return now, waiting
}

// dueBatches are one call's open batches that wait for the provider's
// advised time. One whose time comes before the call's deadline goes then,
// on a goroutine of its own beside the workers, so that claims of other
// tiles never wait for it while it waits; its resend takes a slot of the
// call's limit on batches in flight (gate), ahead of the workers' next
// claims, so the limit holds for every batch on the wire; one whose time
// comes after it, or whose resend the deadline finds not yet on the wire
// (waiting for its time or its slot, read again from the journal, in the
// breaker's cool-down or the pacer, being journaled: unsentAtDeadline),
// stays open, listed in the report's Waiting. It lives
// for one UploadPendingTiles call and holds that call's context, which
// ends its waits.
type dueBatches struct {
	u        *Client
	ctx      context.Context
	flightID string
	// report lists the batches left waiting and hears the waits
	// announced; claims is the call's, for the batches settled when due.
	report *runReport
	claims *claimState
	gate   gate
	// stop, when set, ends the call's sending loop with a run-level
	// failure of a batch it holds.
	stop context.CancelCauseFunc

	wg   sync.WaitGroup
	mu   sync.Mutex
	errs error
	// held are the op IDs of the batches it holds: waiting on a goroutine
	// of their own, or left for a later run. A later pass of the call
	// (after a wait for other runs) does not adopt them again.
	held map[string]bool
	// left are the op IDs of the batches the call left open on purpose
	// (resends or the resend budget spent, outcome unknown): a later pass
	// of the call does not adopt them either; the next call settles them.
	left map[string]bool
	// behind: a sequenced worker ended because a batch d holds, waiting
	// within the deadline, has the client's next number (sequenceBusy);
	// the call passes again once d has settled it (sendAgain).
	behind bool
}

func newDueBatches(ctx context.Context, u *Client, flightID string, rep *runReport, claims *claimState, g gate) *dueBatches {
	return &dueBatches{u: u, ctx: ctx, flightID: flightID, report: rep, claims: claims, gate: g}
}

// hold takes a batch that this run sent and that waits for its not-before,
// left from now: it is announced, then waited for within the deadline or
// left for a later run.
func (d *dueBatches) hold(we *waitingError) { d.holdFor(we.w, we.left, we.past) }

// holdFor is hold; past is what the batch's sends in this call before it
// waited leave its next exchange (its next send is a resend, and its
// counts go on), none for a batch an earlier run left waiting.
func (d *dueBatches) holdFor(w Wait, left time.Duration, past carried) {
	d.mu.Lock()
	if d.held == nil {
		d.held = map[string]bool{}
	}
	d.held[w.OpID] = true
	d.mu.Unlock()
	w.PastDeadline = !d.u.fitsDeadline(d.ctx, left)
	d.u.announce(d.report, w)
	if w.PastDeadline {
		d.report.waiting(w)
		return
	}
	d.wg.Go(func() {
		if still, ok := d.settleWhenDue(w, left, past); ok {
			// The batch stays open waiting as the call ends: listed, and
			// still held, so no later pass of the call adopts it.
			d.report.waiting(still)
			return
		}
		// Settled, failed, or left open for another reason: a later pass
		// may adopt it again.
		d.mu.Lock()
		delete(d.held, w.OpID)
		d.mu.Unlock()
	})
}

// stoppedBy records that a sequenced worker ended because batch opID, this
// call's, holds the client's next number; it reports whether d holds the
// batch to settle within the call (else it is left for the next call).
func (d *dueBatches) stoppedBy(opID string) bool {
	if d.report.leftWaiting(opID) {
		d.report.stoppedBehindWaiting() // its time is past the deadline: the rest waits with it
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ok := d.held[opID] && !d.left[opID]
	d.behind = d.behind || ok
	return ok
}

// sendAgain reports whether the call should pass again before it ends: a
// sequenced worker stopped behind a batch d held, and d has since settled
// every batch it held (it waits for them). The tiles the worker left are
// then sent in the call, not left pending for the next. It reports false
// when a held batch ended the call with a run-level error.
func (d *dueBatches) sendAgain() bool {
	d.mu.Lock()
	behind := d.behind
	d.behind = false
	d.mu.Unlock()
	if !behind {
		return false
	}
	return d.wait() == nil && d.ctx.Err() == nil
}

// leave records that the call left batch opID open for the next call.
func (d *dueBatches) leave(opID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.left == nil {
		d.left = map[string]bool{}
	}
	d.left[opID] = true
}

// heldNow returns the op IDs of the batches d holds now and of those the
// call left open: the batches a pass of the call leaves alone.
func (d *dueBatches) heldNow() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := maps.Clone(d.held)
	if ids == nil {
		ids = map[string]bool{}
	}
	maps.Copy(ids, d.left)
	return ids
}

// notIn returns the batches of open whose op IDs are not in ids.
func notIn(open []tilestore.Batch, ids map[string]bool) []tilestore.Batch {
	if len(ids) == 0 {
		return open
	}
	return slices.DeleteFunc(slices.Clone(open), func(b tilestore.Batch) bool { return ids[b.OpID] })
}

// holdAdopted holds the adopted batches splitWaiting set apart; read is
// when the database read them (their NotBeforeIn counts from it).
func (d *dueBatches) holdAdopted(waiting []tilestore.Batch, read time.Time) {
	for _, b := range waiting {
		d.holdFor(Wait{Reason: WaitProviderAdvice, OpID: b.OpID, Tiles: len(b.TileIDs), Until: *b.NotBefore,
			Detail: "advised when an earlier run sent it"}, b.NotBeforeIn-d.u.now().Sub(read), carried{})
	}
}

// settleWhenDue waits for the batch's time, reads it again from the journal
// (another advice may have moved its not-before, or a run settled it) and
// settles it as an adopted batch, until it is settled, failed or left for
// a later run. It returns the batch's wait, PastDeadline set, when the
// batch stays open waiting as the call ends: its advised time comes after
// the deadline, or the deadline came before the batch's resend went on
// the wire (wherever it was: unsentAtDeadline). It returns false when the batch was settled, failed
// or left open for another reason, or the call was cancelled before its
// deadline.
func (d *dueBatches) settleWhenDue(w Wait, left time.Duration, past carried) (Wait, bool) {
	for {
		if d.waitOut(left) != nil {
			return d.unsentAtDeadline(w) // the call ended first: the batch stays open
		}
		open, err := d.u.store.OpenBatches(d.ctx, d.flightID)
		if err != nil {
			if !d.cutOff() {
				d.fail(fmt.Errorf("read batch %s after its advised wait: %w", w.OpID, err))
				return Wait{}, false
			}
			return d.unsentAtDeadline(w)
		}
		i := slices.IndexFunc(open, func(b tilestore.Batch) bool { return b.OpID == w.OpID })
		if i < 0 {
			return Wait{}, false // settled or failed meanwhile
		}
		b := open[i]
		if b.NotBeforeIn > 0 {
			left = b.NotBeforeIn
			if w.Until = *b.NotBefore; !d.u.fitsDeadline(d.ctx, left) {
				w.PastDeadline = true
				d.u.announce(d.report, w)
				return w, true
			}
			continue
		}
		sent, err := d.settle(b, past)
		var we *waitingError
		switch {
		case errors.As(err, &we) && !d.u.fitsDeadline(d.ctx, we.left):
			we.w.PastDeadline = true
			d.u.announce(d.report, we.w)
			return we.w, true
		case errors.As(err, &we):
			d.u.announce(d.report, we.w)
			w, left, past = we.w, we.left, we.past
		case errors.Is(err, errLeftOpen):
			d.leave(w.OpID) // its outcome is unknown: the next call asks again
			return Wait{}, false
		case err != nil && d.cutOff() && !sent:
			// The call ended before the resend went on the wire (in its
			// wait for a slot, the breaker's cool-down, the pacer, its
			// journaling): it was not sent again.
			return d.unsentAtDeadline(w)
		case err != nil && d.cutOff():
			// The call ended while the resend was on the wire: sent, its
			// outcome unknown; the batch stays open for the next run.
			return Wait{}, false
		case err != nil:
			d.fail(err)
			return Wait{}, false
		default:
			return Wait{}, false
		}
	}
}

// unsentAtDeadline is settleWhenDue's one end for a batch the call ended
// before its resend went on the wire, wherever it was (its wait, the
// journal's read, its wait for a slot, the breaker, the pacer, its
// journaling): when the call's deadline ended it, the batch waits on, for
// the next run, which may send it from w.Until on (its journaled
// not-before, which may have come already); a cancellation before the
// deadline leaves it open unlisted, as it does the call's other work.
func (d *dueBatches) unsentAtDeadline(w Wait) (Wait, bool) {
	if !d.deadlineCame() {
		return Wait{}, false
	}
	w.PastDeadline = true
	d.u.log.Warn().Str("op_id", w.OpID).Int("tiles", w.Tiles).Time("until", w.Until).
		Msg("the run's deadline came before the batch waiting for the provider's advised time went again: " +
			"it stays open for the next run, which sends it once that time has come (at once, if it has)")
	return w, true
}

// minRecheck and maxRecheck bound the real time between two reads of a
// waiting batch from the journal: a not-before a little ahead by the
// database's clock is not read over and over, and a wait on an injected
// clock (whose own deadline may end it) reads it no more often than once
// per the wait, or per second when the wait is longer.
const (
	minRecheck = 10 * time.Millisecond
	maxRecheck = time.Second
)

// waitOut waits left (at least minRecheck) with the uploader's sleep, and
// then, if that returned sooner, the rest on the real clock, up to
// maxRecheck: the not-before it waits for is the database's time, which no
// injected clock moves, so a sleep that returns early (a test's, at once)
// must not turn the wait into reads of the journal in a loop.
func (d *dueBatches) waitOut(left time.Duration) error {
	left = max(left, minRecheck)
	start := time.Now()
	if err := d.u.sleep(d.ctx, left); err != nil {
		return err
	}
	return operation.Sleep(d.ctx, min(left, maxRecheck)-time.Since(start))
}

// deadlineCame reports whether the call's deadline has come: its context
// ended by it, or, not yet ended, the uploader's clock has reached it. A
// call cancelled before its deadline has not.
func (d *dueBatches) deadlineCame() bool {
	if err := d.ctx.Err(); err != nil {
		return errors.Is(err, context.DeadlineExceeded)
	}
	dl, ok := d.ctx.Deadline()
	return ok && !d.u.now().Before(dl)
}

// cutOff reports whether the call's context has ended, or its deadline has
// come by the uploader's clock (the request's own deadline, the same
// instant, may fire first): what a batch's exchange ended with then is the
// call's end, not a failure.
func (d *dueBatches) cutOff() bool {
	if d.ctx.Err() != nil {
		return true
	}
	dl, ok := d.ctx.Deadline()
	return ok && !d.u.now().Before(dl)
}

// settle settles b in a slot of the call's limit on batches in flight,
// the first that frees, and reports whether its resend went on the wire
// (sendOpts.wire): when the call ends before it did, b was not sent again.
// The worker holding a slot never waits for a waiting batch: with a client
// sequence (one slot), a claim that finds this run's waiting batch holding
// the next number ends its worker (sequenceBusy), which frees the slot.
func (d *dueBatches) settle(b tilestore.Batch, past carried) (sent bool, err error) {
	release, err := d.gate.AcquireFirst(d.ctx)
	if err != nil {
		return false, fmt.Errorf("wait for a slot to resend batch %s: %w", b.OpID, err)
	}
	defer release()
	members, err := d.u.loadMembers(d.ctx, d.flightID, []tilestore.Batch{b})
	if err != nil {
		return false, err
	}
	var wire atomic.Bool
	err = d.u.settleAdopted(d.ctx, d.flightID, b, members, sendOpts{past: past, wire: &wire}, d.report, d.claims)
	return wire.Load(), err
}

// fail records a run-level failure and stops the call's loop at once.
func (d *dueBatches) fail(err error) {
	d.mu.Lock()
	d.errs = errors.Join(d.errs, err)
	d.mu.Unlock()
	if d.stop != nil {
		d.stop(err)
	}
}

// wait waits for every batch held to be settled or left, and returns what
// ended any of them with a run-level error.
func (d *dueBatches) wait() error {
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.errs
}
