package retrydecorator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// UploadPendingTiles counts rejections an earlier run left uncounted, calls
// the inner uploader (which calls back through Request.SettledOpen to have
// the rejections of the open batches it settled counted before it forms new
// ones), counts the rejections it recorded, and while its
// outcome is partial, tiles are still pending and retries remain, sleeps
// min(base*2^(n-1), cap) and calls it again. The inner uploader forms its
// batches from what is pending, so a retry sends only unanswered or
// rejected tiles, and never a given-up one.
//
// The report aggregates every inner call: counts are summed, Rejections
// keeps each tile's latest rejection, Pending is the count after the last
// call, RetryCount is the retries made and NextRetryAt is set when the
// in-call budget ran out with tiles still pending, or when the work still
// pending must wait past the deadline (uploader.Report.Blocked:
// the provider's advised time, or other runs' batches the call waited for
// until its deadline): the call then ends without retrying, NextRetryAt
// the earliest time some of it may go on. The outcome is the last
// inner call's, except that a run that gave up a tile or left tiles pending
// is partial. An inner error ends the call at once (after counting what the
// inner call recorded). A cancelled context ends a backoff sleep at once and
// returns the report so far, outcome partial, with an error wrapping ctx.Err(). A dry run is passed through untouched.
func (u *Uploader) UploadPendingTiles(ctx context.Context, req uploader.Request) (uploader.Report, error) {
	log := u.log.With().Str("flight_id", req.FlightID).Logger()
	log.Info().
		Int("max_in_call_retries", u.cfg.MaxInCallRetries).
		Int("max_per_tile_attempts", u.cfg.MaxPerTileAttempts).
		Float64("backoff_base_s", u.cfg.BackoffBase.Seconds()).
		Float64("backoff_cap_s", u.cfg.BackoffCap.Seconds()).
		Str("jitter", string(u.cfg.Jitter)).
		Bool("dry_run", req.DryRun).
		Msg("upload with idempotent retry")
	if req.DryRun {
		return u.inner.UploadPendingTiles(ctx, req)
	}

	agg := aggregate{flightID: req.FlightID}
	// Rejections an earlier run recorded but never counted (it died between
	// settling a batch and counting) are counted first, so a tile already at
	// its budget gives up before it is sent again.
	if _, err := u.count(ctx, req.FlightID, &agg); err != nil {
		return agg.fail(u.clock.Now()), err
	}

	// Settling an earlier run's open batch may record a tile's last
	// rejection: the inner uploader calls back once it has settled them so
	// they are counted before any new batch forms, and a tile at its budget
	// is given up instead of sent again.
	settledOpen := req.SettledOpen
	req.SettledOpen = func(ctx context.Context) error {
		if _, err := u.count(ctx, req.FlightID, &agg); err != nil {
			return err
		}
		if settledOpen != nil {
			return settledOpen(ctx)
		}
		return nil
	}

	var prevSleep time.Duration // for decorrelated jitter
	for n := 0; ; n++ {
		rep, ierr := u.inner.UploadPendingTiles(ctx, req)
		agg.add(rep)
		// Count even when the inner call failed: the batches it settled
		// before failing recorded rejections that must not wait for a
		// later run to be counted. A call that returned no error and
		// reports no rejection recorded none (Rejected counts every one it
		// recorded), so the success path costs one count, the one before
		// the call; a rejection another process recorded meanwhile is that
		// process's to count, or the next run's first count's.
		var counted tilestore.CountResult
		var cerr error
		if ierr != nil || rep.Rejected > 0 {
			counted, cerr = u.count(ctx, req.FlightID, &agg)
		}
		if ierr != nil {
			if cerr != nil {
				ierr = errors.Join(ierr, cerr)
			}
			return agg.fail(u.clock.Now()), ierr
		}
		if cerr != nil {
			return agg.fail(u.clock.Now()), cerr
		}
		if rep.Outcome != uploader.OutcomePartial {
			r := agg.report()
			if r.Outcome == uploader.OutcomeSuccess && agg.givenUp > 0 {
				r.Outcome = uploader.OutcomePartial
			}
			return r, nil
		}

		// The inner call counted what is left as it ended (a scan of the
		// flight's pending tiles); only tiles the count just gave up make
		// that stale.
		pending, pendingBytes := rep.Pending, rep.PendingBytes
		if len(counted.GaveUp) > 0 {
			var err error
			if pending, pendingBytes, err = u.store.PendingSummary(ctx, req.FlightID); err != nil {
				return agg.fail(u.clock.Now()), fmt.Errorf("count pending tiles of flight %s: %w", req.FlightID, err)
			}
		}
		agg.r.Pending, agg.r.PendingBytes = pending, pendingBytes
		if pending == 0 {
			return agg.finalReport(), nil
		}
		waitsUntil, blocked := agg.r.Blocked()
		if blocked {
			// Another call would find the same work waiting past the
			// deadline (for the provider's advised time, or in other runs'
			// batches the call waited for until its deadline): the run
			// ends, and the next may go on at the earliest of those times.
			agg.r.NextRetryAt = &waitsUntil
			e := log.Info().Int("remaining_pending_count", pending).Time("next_retry_at", waitsUntil)
			if agg.r.Held != nil {
				e = e.Int("held_by_other_runs", agg.r.Held.Tiles)
			}
			e.Msg("the tiles still pending must wait past this run's deadline; not retrying")
			return agg.finalReport(), nil
		}
		if pending <= rep.LocalFailed {
			// Only tiles with a bad cached blob are left: another call
			// would find the same blobs bad. A person mends them.
			log.Warn().Int("remaining_pending_count", pending).Int("local_failures", rep.LocalFailed).
				Msg("only tiles with bad cached blobs are still pending; not retrying")
			return agg.finalReport(), nil
		}
		if err := ctx.Err(); err != nil {
			// The run's end (its deadline, a signal), not its budget, stops
			// the retries: what is left does not wait, so it is work that
			// end cut, as in the wait before a retry below.
			r := agg.finalReport()
			r.Finished = u.clock.Now()
			return r, fmt.Errorf("%d tiles of flight %s still pending as the run ended: %w", pending, req.FlightID, err)
		}
		if n >= u.cfg.MaxInCallRetries {
			next := u.clock.Now().Add(u.cfg.BackoffCap)
			if !waitsUntil.IsZero() && waitsUntil.Before(next) {
				next = waitsUntil // a waiting batch may go first
			}
			agg.r.NextRetryAt = &next
			log.Warn().Int("retries", n).Int("remaining_pending_count", pending).
				Time("next_retry_at", next).Msg("in-call retry budget used up; tiles still pending")
			return agg.finalReport(), nil
		}

		attempt := n + 1
		sleep := u.cfg.Backoff(attempt, prevSleep)
		prevSleep = sleep
		log.Info().Int("attempt", attempt).Int("max_in_call_retries", u.cfg.MaxInCallRetries).
			Float64("sleep_s", sleep.Seconds()).Int("remaining_pending_count", pending).
			Int64("remaining_pending_bytes", pendingBytes).Int("rejected", rep.Rejected).
			Msg("partial upload; retrying after backoff")
		if u.hooks.OnRetry != nil {
			u.hooks.OnRetry(RetryEvent{FlightID: req.FlightID, Attempt: attempt, Sleep: sleep,
				Pending: pending, PendingBytes: pendingBytes, Rejected: rep.Rejected})
		}
		if err := u.clock.Sleep(ctx, sleep); err != nil {
			// Every batch so far was answered and counted; only the retry
			// was interrupted, so the report is partial, not failed.
			r := agg.finalReport()
			r.Finished = u.clock.Now()
			return r, fmt.Errorf("wait %s before retry %d of flight %s: %w",
				sleep, attempt, req.FlightID, err)
		}
		agg.r.RetryCount = attempt
	}
}
