package uploader

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// candidate is a group of pending tiles the producer sized for one batch;
// a worker verifies their blobs and journals the ones that may go.
type candidate struct {
	tiles    []tilestore.Tile
	tooLarge []unfit
}

// unfit is a tile that cannot fit the provider's limits, and why.
type unfit struct {
	tile tilestore.Tile
	why  string
}

// UploadPendingTiles uploads the flight's pending tiles. See TileUploader.
func (u *HTTPTileUploader) UploadPendingTiles(ctx context.Context, req Request) (UploadBatchReport, error) {
	t := newTally(req.FlightID, u.now(), req.Progress)
	ctx = withTally(ctx, t)
	openings := u.breaker.openingsSoFar()
	finish := func(err error) (UploadBatchReport, error) {
		t.breakerOpenings(u.breaker.openingsSoFar() - openings)
		pctx, cancel := journalCtx(ctx)
		defer cancel()
		// Settlements commit without waiting for the disk; this durable
		// write flushes them all before the run reports what it did.
		if !req.DryRun {
			if serr := u.store.SyncJournal(pctx, req.FlightID); serr != nil && err == nil {
				err = fmt.Errorf("make the upload journal durable: %w", serr)
			}
		}
		pending, _, perr := u.store.PendingSummary(pctx, req.FlightID)
		if perr != nil && err == nil {
			err = fmt.Errorf("count pending tiles of flight %s: %w", req.FlightID, perr)
		}
		return t.report(u.now(), pending, err), err
	}
	if err := u.ConfirmFlightState(ctx, req.FlightID); err != nil {
		return finish(err)
	}
	caps, err := u.capabilities(ctx)
	if err != nil {
		return finish(err)
	}
	lim := caps.limits(req.BatchSize)
	if err := u.preflight(ctx, req.FlightID); err != nil {
		return finish(err)
	}
	if req.DryRun {
		return u.dryRun(ctx, req, lim, t)
	}
	settled, err := u.settleOpen(ctx, req.FlightID, t)
	if err != nil {
		return finish(err)
	}
	if settled > 0 && req.SettledOpen != nil {
		if err := req.SettledOpen(ctx); err != nil {
			return finish(fmt.Errorf("after settling %d open batch(es): %w", settled, err))
		}
	}
	// Tiles an earlier batch may have stored without settling them are
	// asked about before they could travel under a new key.
	unclear, err := u.lookUpAmbiguous(ctx, req.FlightID, max(req.Concurrency, defaultConcurrency), t)
	if err != nil {
		return finish(err)
	}
	skip := make(map[string]bool, len(unclear))
	for _, id := range unclear {
		skip[id] = true
	}
	if req.MaxAttempts > 0 {
		ids, err := u.store.AtBudget(ctx, req.FlightID, req.MaxAttempts)
		if err != nil {
			return finish(err)
		}
		if len(ids) > 0 {
			u.log.Warn().Str("flight_id", req.FlightID).Int("tiles", len(ids)).Int("max_attempts", req.MaxAttempts).
				Msg("tiles already at their attempt budget are not sent; the next retrying run gives them up")
			for _, id := range ids {
				skip[id] = true
			}
		}
	}
	return finish(u.sendPending(ctx, req, lim, skip, t))
}

// sendPending runs one producer that pages the pending tiles and sizes
// batches, and req.Concurrency workers that verify, journal and send them.
// Memory holds at most one page and the batches in the channel.
func (u *HTTPTileUploader) sendPending(ctx context.Context, req Request, lim limits, skip map[string]bool, t *tally) error {
	workers := req.Concurrency
	if workers <= 0 {
		workers = defaultConcurrency
	}
	// stop ends batch forming on the first run-level error; batches already
	// sent finish (they are journaled) but no new one starts.
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		stop()
	}
	ch := make(chan candidate, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range ch {
				if stopCtx.Err() != nil {
					continue // drain: nothing of these was journaled
				}
				// stopCtx, not ctx: a batch formed or journaled but not yet
				// started when another ends the run is not sent (it stays
				// open, to be resent under its key by the next run); one
				// already on the wire finishes and its answer is recorded.
				if err := u.processCandidate(stopCtx, req.FlightID, c, t); err != nil {
					fail(err)
				}
			}
		}()
	}
	perr := u.produce(stopCtx, req.FlightID, lim, skip, ch)
	close(ch)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if perr != nil && !errors.Is(perr, context.Canceled) {
		return perr
	}
	return ctx.Err()
}

// produce pages the pending tiles in tile_id order and cuts them into
// candidates that fit the provider's limits, leaving out the tiles in skip.
func (u *HTTPTileUploader) produce(ctx context.Context, flightID string, lim limits, skip map[string]bool, ch chan<- candidate) error {
	var cur candidate
	var curBytes int64 = bodyOverhead
	flush := func() bool {
		if len(cur.tiles) == 0 && len(cur.tooLarge) == 0 {
			return true
		}
		select {
		case ch <- cur:
		case <-ctx.Done():
			return false
		}
		cur, curBytes = candidate{}, bodyOverhead
		return true
	}
	for tl, err := range pendingTiles(ctx, u.store, flightID, pageSize) {
		if err != nil {
			return fmt.Errorf("page pending tiles of flight %s: %w", flightID, err)
		}
		if skip[tl.ID] {
			continue
		}
		// A tile that cannot fit is never sent: no batch could carry it.
		cost := tl.SizeBytes + partOverhead(tl)
		switch {
		case tl.SizeBytes > lim.tileBytes:
			cur.tooLarge = append(cur.tooLarge, unfit{tl, fmt.Sprintf(
				"%d bytes is over the provider's max_tile_bytes of %d", tl.SizeBytes, lim.tileBytes)})
			continue
		case bodyOverhead+cost > lim.bytes:
			cur.tooLarge = append(cur.tooLarge, unfit{tl, fmt.Sprintf(
				"%d bytes (%d with its request framing) is over the provider's max_batch_bytes of %d even alone in a batch",
				tl.SizeBytes, bodyOverhead+cost, lim.bytes)})
			continue
		}
		if len(cur.tiles) > 0 && (len(cur.tiles) >= lim.tiles || curBytes+cost > lim.bytes) {
			if !flush() {
				return ctx.Err()
			}
		}
		cur.tiles = append(cur.tiles, tl)
		curBytes += cost
	}
	if !flush() {
		return ctx.Err()
	}
	return ctx.Err()
}

// processCandidate records the too-large tiles of a candidate as local
// rejections under one fresh operation ID, leaves the tiles whose blob is
// bad pending (a LocalFailure, never counted), then journals the remaining
// tiles as a batch before sending its first byte.
func (u *HTTPTileUploader) processCandidate(ctx context.Context, flightID string, c candidate, t *tally) error {
	var local []tilestore.Rejection
	rejOp := ""
	reject := func(tl tilestore.Tile, reason, msg string) {
		if rejOp == "" {
			rejOp = operation.NewID()
		}
		local = append(local, tilestore.Rejection{OpID: rejOp, TileID: tl.ID, Reason: reason, Message: msg})
	}
	for _, f := range c.tooLarge {
		reject(f.tile, tilestore.ReasonTooLarge, f.why)
	}
	send := c.tiles[:0:0]
	tb := newTileBytes(c.tiles)
	for _, tl := range c.tiles {
		lf, err := tb.read(u.blobs, tl)
		if err != nil {
			return err
		}
		if lf != nil {
			u.localFailure(t, *lf)
			continue
		}
		send = append(send, tl)
	}
	if len(local) > 0 {
		if err := u.store.RecordRejections(ctx, local); err != nil {
			return fmt.Errorf("record %d local rejection(s): %w", len(local), err)
		}
		t.local(local)
	}
	if len(send) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err // the run ended while the blobs were verified
	}
	b := tilestore.Batch{OpID: operation.NewID(), FlightID: flightID,
		TileIDs: make([]string, len(send)), SHA256s: make([]string, len(send))}
	for i, tl := range send {
		b.TileIDs[i], b.SHA256s[i] = tl.ID, tl.SHA256
	}
	b.Fingerprint = fingerprint(flightID, b.TileIDs, b.SHA256s)
	if err := u.store.OpenBatch(ctx, b); err != nil {
		return fmt.Errorf("journal batch of %d tile(s): %w", len(send), err)
	}
	if err := u.sendBatch(ctx, flightID, b.OpID, send, tb.data, t); err != nil && !errors.Is(err, errLeftOpen) {
		return err
	}
	// A batch left open has its tiles behind the cursor: this run does not
	// form them again, and the next one settles it first.
	return nil
}

// dryRun pages and sizes exactly as a real run would and reports the
// batches and bytes it would send; a tile whose blob is missing or of the
// wrong size is reported as a local failure instead (its sha256 is checked
// only when a real run reads it to send). It sends and changes nothing.
func (u *HTTPTileUploader) dryRun(ctx context.Context, req Request, lim limits, t *tally) (UploadBatchReport, error) {
	ch := make(chan candidate)
	var pending int
	var batches int
	var bytes int64
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			pending += len(c.tooLarge)
			sent := false
			for _, tl := range c.tiles {
				if cerr != nil {
					break
				}
				lf, err := CheckBlob(u.blobs, tl, CheckSize)
				switch {
				case err != nil:
					cerr = err
				case lf != nil:
					u.localFailure(t, *lf)
				default:
					pending++
					bytes += tl.SizeBytes
					sent = true
				}
			}
			if sent {
				batches++
			}
		}
	}()
	err := u.produce(ctx, req.FlightID, lim, nil, ch)
	close(ch)
	<-done
	if err == nil {
		err = cerr
	}
	rep := t.report(u.now(), pending, err)
	rep.Batches, rep.Bytes = batches, bytes
	return rep, err
}
