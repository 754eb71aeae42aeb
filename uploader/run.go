package uploader

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"

	"github.com/tilectl/tilectl/tilestore"
)

// UploadPendingTiles uploads the flight's pending tiles. See TileUploader.
func (u *Client) UploadPendingTiles(ctx context.Context, req Request) (Report, error) {
	// rep is what the call reports, claims what its claims go by: both
	// are passed to every function of the call that counts, settles or
	// claims, and rep to every exchange (the sender counts it).
	rep := newRunReport(req.FlightID, u.now(), req.Progress, req.Waiting)
	claims := &claimState{}
	openings := u.breaker.openingsSoFar()
	// stopRenewal ends the lease renewal (keepLeases) once it runs.
	stopRenewal := func() {}
	finish := func(err error) (Report, error) {
		u.warm.idle()
		rep.breakerOpenings(u.breaker.openingsSoFar() - openings)
		pctx, cancel := detachedCtx(ctx)
		defer cancel()
		// The three are independent and go at once: the end of a run is
		// time no batch is on the wire.
		var rerr, serr, perr error
		var pending int
		var pendingBytes int64
		var ended sync.WaitGroup
		if !req.DryRun {
			// What this run leaves open is for the next run to settle, now,
			// not when the lease would have run out. The renewal stops
			// first: a renewal after the release would hold the batches
			// from other runs again.
			stopRenewal()
			ended.Go(func() { rerr = u.store.ReleaseLeases(pctx) })
			// Settlements commit without waiting for the disk; this durable
			// write flushes them all before the run reports what it did.
			ended.Go(func() { serr = u.store.SyncJournal(pctx, req.FlightID) })
		}
		ended.Go(func() { pending, pendingBytes, perr = u.store.PendingSummary(pctx, req.FlightID) })
		ended.Wait()
		// A lost lease cancels the batches on the wire: the loss, not the
		// cancellation it caused, is what the run reports.
		if lost := leaseLostOf(ctx); !req.DryRun && lost != nil && lost.Err() != nil &&
			(err == nil || errors.Is(err, context.Canceled)) {
			err = context.Cause(lost)
		}
		// The end's own failures, in this order: leases not released, a
		// journal not made durable, a pending count not known. The first is
		// the run's error when nothing else ended it, and is reported beside
		// a deadline or a cancellation, which say nothing of it. After any
		// other error it is left out: it mostly repeats that one (a
		// database that went away, say).
		var endErr error
		switch {
		case rerr != nil:
			endErr = rerr
		case serr != nil:
			endErr = fmt.Errorf("make the upload journal durable: %w", serr)
		case perr != nil:
			endErr = fmt.Errorf("count pending tiles of flight %s: %w", req.FlightID, perr)
		}
		// Whether the deadline cut only work that waits is decided from a
		// complete report only: its pending count known, its journal
		// durable, its leases released.
		if err != nil && endErr == nil && !req.DryRun && endedBlocked(ctx, err, rep.report(u.now(), pending, nil)) {
			err = nil
		}
		switch {
		case endErr == nil:
		case err == nil:
			err = endErr
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			err = errors.Join(err, endErr)
		}
		out := rep.report(u.now(), pending, err)
		if !req.DryRun {
			out.PendingBytes = pendingBytes
		}
		if !req.DryRun && out.Outcome == OutcomeSuccess && pending > 0 {
			// Nothing was rejected, but tiles are left: a batch failed and
			// its tiles await a lookup, another run's batch was failed
			// under it, a batch waits for the provider's advised time, or
			// other runs still held some at the deadline. Partial: the
			// decorator calls again (with a fresh lookup) unless all of it
			// must wait (rep.Blocked).
			out.Outcome = OutcomePartial
		}
		if until, stop := out.Blocked(); stop && err == nil {
			out.NextRetryAt = &until
		}
		return out, err
	}
	if err := u.ConfirmFlightState(ctx, req.FlightID); err != nil {
		return finish(err)
	}
	g := u.gateFor(req)
	if !req.DryRun {
		// On a long link the connections of the first batches open
		// while the provider is asked its limits: its answer finds them
		// ready, not one handshake away (on a link that answers within
		// warmHold, none opens ahead). Over HTTPS they open once that answer shows
		// HTTP/1.x (none for HTTP/2, whose one connection carries every
		// request): the dialer keeps what is asked here until then.
		u.warm.ahead(g.Ahead())
	}
	caps, err := u.capabilities(ctx, rep)
	if err != nil {
		return finish(err)
	}
	lim := caps.limits(req.BatchSize)
	page, err := u.firstPage(ctx, req.FlightID)
	if err != nil {
		return finish(err)
	}
	if err := u.preflight(req.FlightID, page); err != nil {
		return finish(err)
	}
	if req.DryRun {
		return u.dryRun(ctx, req, lim, rep)
	}
	// The limit's first round is counted in bytes where it is still to
	// be measured: the connections of the batches it now allows open
	// while the run claims its first batches.
	g.ExpectBatchBytes(lim.batchBytes(page))
	u.warm.ahead(g.Ahead())
	if u.clientID != "" {
		if err := u.prepareSequence(ctx, rep); err != nil {
			return finish(err)
		}
	}
	ctx, stopRenewal, stopLeases := u.keepLeases(ctx)
	defer stopLeases()
	// lctx is the sending loop's: a run-level failure of a waiting batch
	// cancels it, which stops the claims, the passes and the wait for
	// other runs at once, as a worker's error stops the claims.
	lctx, stopLoop := context.WithCancelCause(ctx)
	defer stopLoop(nil)
	// Batches waiting for the provider's advised time go when it comes,
	// beside the new ones; claims of other tiles do not wait for them.
	wctx, stopWaiting := context.WithCancel(lctx)
	defer stopWaiting()
	due := newDueBatches(wctx, u, req.FlightID, rep, claims, g)
	due.stop = stopLoop
	finishDue := func(err error) (Report, error) {
		if err != nil {
			stopWaiting() // a run-level error: no waiting batch goes after it
		}
		derr := due.wait()
		if err == nil || derr != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
			// The loop's own cancellation is the echo of the waiting
			// batch's failure: report the failure.
			err = derr
		}
		return finish(err)
	}
	var warned sync.WaitGroup
	defer warned.Wait()
	// The runs holding the flight's open batches: a dead one's are adopted
	// in the first pass, a live one's are waited for after it.
	last, err := u.heldWork(lctx, req.FlightID)
	if err != nil {
		return finishDue(err)
	}
	dead := last.dead
	announced := false
	for first := true; ; first = false {
		if err := u.pass(lctx, req, g, lim, rep, claims, dead, first, &warned, due); err != nil {
			return finishDue(err)
		}
		// The flight is done only when no other run holds any of it:
		// this run waits for their batches, bounded by its deadline, and
		// takes over what a dead holder leaves.
		var done bool
		dead, done, err = u.waitForHolders(lctx, req, rep, &last, &announced)
		if err != nil {
			return finishDue(err)
		}
		if done && !due.sendAgain() {
			return finishDue(nil)
		}
	}
}

// pass settles the open batches this run may adopt (its own, expired
// ones, and those of the dead runs), looks up the tiles an earlier batch
// left unclear, and sends what is pending and not held by another run.
// Batches that wait for the provider's advised time go to due.
func (u *Client) pass(ctx context.Context, req Request, g gate, lim limits, rep *runReport, claims *claimState, dead []string, first bool, warned *sync.WaitGroup, due *dueBatches) error {
	settled, err := u.settleOpen(ctx, req.FlightID, dead, rep, claims, req.Settling, due, g)
	if err != nil {
		return err
	}
	if settled > 0 && req.SettledOpen != nil {
		if err := req.SettledOpen(ctx); err != nil {
			return fmt.Errorf("after settling %d open batch(es): %w", settled, err)
		}
	}
	// Tiles an earlier batch may have stored without settling them are
	// asked about before they could travel under a new key; those without
	// a clear answer wait for the next run.
	unclear, _, err := u.lookUpAmbiguous(ctx, req.FlightID, max(req.Concurrency, defaultConcurrency), rep, claims)
	if err != nil {
		return err
	}
	claims.skipIDs(unclear)
	if first && req.MaxAttempts > 0 {
		// Each claim leaves these out itself (Claim.MaxAttempts), also when
		// another run's rejection brings a tile to its budget mid-run; this
		// only says so, beside the sends: no send waits for it.
		warned.Go(func() {
			ids, err := u.store.AtBudget(ctx, req.FlightID, req.MaxAttempts)
			switch {
			case err != nil && ctx.Err() == nil:
				u.log.Warn().Err(err).Str("flight_id", req.FlightID).Msg("list the tiles already at their attempt budget")
			case len(ids) > 0:
				u.log.Warn().Str("flight_id", req.FlightID).Int("tiles", len(ids)).Int("max_attempts", req.MaxAttempts).
					Msg("tiles already at their attempt budget are not sent; the next retrying run gives them up")
			}
		})
	}
	return u.sendPending(ctx, req, g, lim, rep, claims, due)
}

// dryRun pages and sizes as a real run would and reports the batches and
// bytes it would send: each batch is pick's choice among the next
// lim.tiles pending tiles (a claim's candidates), the tiles pick leaves
// coming first in the next. A tile whose blob is missing or of the wrong
// size is reported as a local failure instead (its sha256 is checked only
// when a real run reads it to send). It sends and changes nothing.
func (u *Client) dryRun(ctx context.Context, req Request, lim limits, rep *runReport) (Report, error) {
	next, stop := iter.Pull2(pendingTiles(ctx, u.store, req.FlightID, pageSize))
	defer stop()
	var cands []tilestore.Tile
	var pending, batches int
	var bytes int64
	var err error
	for more := true; err == nil; {
		for more && len(cands) < lim.tiles {
			tl, perr, ok := next()
			switch {
			case !ok:
				more = false
			case perr != nil:
				more, err = false, fmt.Errorf("page pending tiles of flight %s: %w", req.FlightID, perr)
			default:
				cands = append(cands, tl)
			}
		}
		if err != nil || len(cands) == 0 {
			break
		}
		b, rs := pick(req.FlightID, "", cands, lim)
		pending += len(rs) // a real run rejects them without sending
		rejected := make(map[string]bool, len(rs))
		for _, r := range rs {
			rejected[r.TileID] = true
		}
		member := make(map[string]bool, len(b.TileIDs))
		for _, id := range b.TileIDs {
			member[id] = true
		}
		var left []tilestore.Tile
		sent := false
		for _, tl := range cands {
			switch {
			case rejected[tl.ID] || err != nil:
				continue
			case !member[tl.ID]:
				left = append(left, tl)
				continue
			}
			lf, cerr := CheckBlob(u.blobs, tl, CheckSize)
			switch {
			case cerr != nil:
				err = cerr
			case lf != nil:
				u.localFailure(rep, *lf)
			default:
				pending++
				bytes += tl.SizeBytes
				sent = true
			}
		}
		if sent {
			batches++
		}
		cands = left
	}
	if err == nil {
		err = ctx.Err()
	}
	out := rep.report(u.now(), pending, err)
	out.Batches, out.Bytes = batches, bytes
	return out, err
}
