package uploader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// gate is the limit on batches in flight: a worker holds a slot from its
// claim to its batch's settlement, and a batch back from the provider's
// advised wait (dueBatches), or an adopted open batch (settleOpen), one
// from its resend to its settlement, taken with AcquireFirst: it goes before a batch not yet claimed, and never
// beside the limit. *concurrency.Controller (adaptive) and
// *concurrency.Fixed implement it. Ahead is the most slots it may allow a
// round trip from now: the connections to have open by then (warm.go).
// ExpectBatchBytes tells it how big the call's batches are, before the
// first is claimed.
type gate interface {
	Acquire(ctx context.Context) (release func(), err error)
	AcquireFirst(ctx context.Context) (release func(), err error)
	Limit() int
	Ahead() int
	ExpectBatchBytes(n int64)
}

var (
	_ gate = (*concurrency.Controller)(nil)
	_ gate = (*concurrency.Fixed)(nil)
)

// gateFor is the limit a call's sends go through: one batch with a client
// ID (strict sequencing: batch n runs only when n-1 is committed, so a
// second batch in flight would be a gap), the fixed number asked, or the
// uploader's adaptive limit.
func (u *Client) gateFor(req Request) gate {
	var g gate = u.adaptive
	switch {
	case u.clientID != "":
		g = concurrency.NewFixed(1)
	case req.Concurrency > 0:
		g = concurrency.NewFixed(req.Concurrency)
	}
	if u.wrapGate != nil {
		g = u.wrapGate(g)
	}
	return g
}

// sendPending runs workers that each take a slot of the call's gate g
// (gateFor), claim the flight's next batch from the store (SELECT ... FOR
// UPDATE SKIP LOCKED, so workers of this and of other processes take
// different tiles), verify its blobs, send it and settle it, until
// nothing is left to claim.
// A worker is started when the gate's limit rises above the workers there
// are, while the call is not drained (a claim from the first tile found
// nothing and nothing was freed since; a batch's end or a claim's
// committed leftovers free tiles, and workers start again): an adaptive
// limit that grows gets the workers to fill it, and no more claims run
// than slots.
func (u *Client) sendPending(ctx context.Context, req Request, g gate, lim limits, rep *runReport, claims *claimState, due *dueBatches) error {
	rep.setGate(g)
	// stop ends claiming on the first run-level error; batches already
	// claimed finish (they are journaled) but no new one is claimed.
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		workers  int
	)
	cur := newClaimCursor(req.Order) // shared: each claim starts after the last tile any worker took
	var worker func()
	// more starts workers up to the gate's limit while the call is not
	// drained (a claim from the first tile found nothing, and no batch of
	// the call ended since); mu is held.
	more := func() {
		for !cur.drained() && workers < g.Limit() {
			workers++
			wg.Go(worker)
		}
	}
	worker = func() {
		defer func() {
			mu.Lock()
			workers--
			mu.Unlock()
		}()
		own := &ownCursor{}
		for stopCtx.Err() == nil {
			release, err := g.Acquire(stopCtx)
			if err != nil {
				return // the run ended
			}
			// The slots the limit may grant by the next round trip find
			// their connections open.
			u.warm.ahead(g.Ahead())
			mu.Lock()
			more()
			mu.Unlock()
			more, err := u.claimAndSend(ctx, stopCtx, req.FlightID, req.MaxAttempts, lim, rep, claims, cur, own, due)
			release()
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				stop()
				return
			}
			if !more {
				return
			}
		}
	}
	mu.Lock()
	more()
	mu.Unlock()
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// claimCursor is the last tile (in the claim order) the workers of one
// call have claimed or rejected, shared by them: a claim starts after it
// instead of after its own worker's last batch, so it does not walk past
// the batches the other workers claimed meanwhile (a row visit per tile of
// each). Only the worker holding turn reads or moves it. A call starts
// with a zero cursor, at the flight's first tile in the order: the tiles
// its lookup gave back, and those rejected in the call before, go first.
type claimCursor struct {
	// turn is held by one worker's claim from reading the cursor to its
	// pick; next by the one claim that may wait for the turn with a
	// database connection and its transaction begun (see claimAndSend).
	turn, next sync.Mutex
	order      tilestore.Order
	last       tilestore.Cursor
	// lookedUpAt is the read of the call's lookup the cursor has seen.
	lookedUpAt time.Time
	// freed counts what in the call may make tiles claimable again: a
	// claim that took tiles ending (its batch settled, failed, left open
	// or waiting), a lookup giving tiles back.
	freed atomic.Int64
	// What the last claims that found nothing knew, written under turn
	// (emptyAt is read without it, by drained): emptyAt is freed's count
	// when a claim from the flight's first tile began that found nothing
	// (-1: none did), emptyAfter where a claim after the cursor began
	// that found nothing, at freed's count emptyAfterAt. While freed has not moved, a claim from the first
	// tile would find nothing too (the workers still waiting for a slot
	// at the end of a call, as many as the limit once was, stop without
	// asking the database again each), and one after that cursor looks
	// from the first tile at once.
	emptyAt      atomic.Int64
	emptyAfterAt int64
	emptyAfter   tilestore.Cursor
}

// newClaimCursor is a call's cursor, at the flight's first tile.
func newClaimCursor(order tilestore.Order) *claimCursor {
	c := &claimCursor{order: order}
	c.emptyAt.Store(-1)
	return c
}

// drained reports whether a claim from the flight's first tile found
// nothing and nothing in the call was freed since: a claim now would find
// nothing too. A claim asks before it waits for its place and again once
// it is next, so a drained call's waiting workers end without each
// beginning a transaction.
func (c *claimCursor) drained() bool {
	return c.emptyAt.Load() == c.freed.Load()
}

// sawLookup moves the cursor back to the first tile when the call looked
// tiles up since it last moved (a lookup in the middle of a call, after a
// number the provider called committed): the tiles found not held go at
// their place in the order, before any further tile of a higher zoom.
func (c *claimCursor) sawLookup(ids []string, at time.Time) {
	if at.Equal(c.lookedUpAt) {
		return
	}
	c.lookedUpAt = at
	if len(ids) > 0 {
		c.last = tilestore.Cursor{}
		c.freed.Add(1)
	}
}

// advance moves the cursor to c unless a worker has already gone past it.
// The order's Less is the database's (migration 0013). A cursor that
// jumps past free tiles (a claim whose transaction failed after its pick,
// which ends the call) leaves them to the next run.
func (c *claimCursor) advance(to tilestore.Cursor) {
	if c.order.Less(c.last, to) {
		c.last = to
	}
}

// ownCursor is where one worker's next claim starts instead of the shared
// cursor.
type ownCursor struct {
	rescan bool             // the last claim found nothing after the cursor: look once from the first tile
	resume tilestore.Cursor // the last claim left candidates over the byte limit right after this tile
}

// after is where the worker's next claim starts.
func (o *ownCursor) after(cur *claimCursor) tilestore.Cursor {
	switch {
	case o.rescan:
		return tilestore.Cursor{}
	case !o.resume.IsZero():
		return o.resume
	}
	return cur.last
}

// claimAndSend claims one batch after the shared cursor (or where own says)
// and sends it. more is false when nothing was left to claim, even from the
// flight's first tile.
func (u *Client) claimAndSend(ctx, stopCtx context.Context, flightID string, maxAttempts int, lim limits, rep *runReport, claims *claimState, cur *claimCursor, own *ownCursor,
	due *dueBatches) (more bool, err error) {
	lookedUp, lookedUpAt := claims.lookedUpIDs()
	// The workers' claims take turns from reading the cursor to their
	// pick: a claim that read the cursor while another's was between the
	// two would start where the other did and walk past every row the
	// other had locked (SKIP LOCKED still visits each), which costs the
	// database time per tile (BenchmarkJournalPerTile measures it). The
	// turn ends at the pick, before the journal's writes and the commit's
	// wait for the disk. It begins once the claim has a connection
	// (Claim.At), and its transaction begins in the same round trip as its
	// statement: a turn waits for neither. One claim at a time gets its
	// connection while another holds the turn (next): more would hold the
	// pool's connections idle, which the settlements and the lease renewal
	// need. Other processes' claims still pass each other by SKIP LOCKED.
	if cur.drained() {
		return false, nil // a claim from the first tile found nothing, and nothing was freed since
	}
	cur.next.Lock()
	endNext := sync.OnceFunc(cur.next.Unlock) // this claim is the next to take the turn until it does
	defer endNext()
	if cur.drained() { // found so by the claim that was next before this one
		return false, nil
	}
	var after tilestore.Cursor
	var freed int64 // cur.freed when the claim took its turn
	tookTurn := false
	endTurn := func() {} // the turn's end once the claim holds it
	takeTurn := func() tilestore.Cursor {
		cur.turn.Lock()
		endTurn, tookTurn = sync.OnceFunc(cur.turn.Unlock), true
		endNext()
		cur.sawLookup(lookedUp, lookedUpAt)
		after = own.after(cur)
		freed = cur.freed.Load()
		if !after.IsZero() && after == cur.emptyAfter && freed == cur.emptyAfterAt {
			after = tilestore.Cursor{} // nothing after it, as another worker's claim found
		}
		return after
	}
	defer func() { endTurn() }() // on every way out, a panic's included
	opID := operation.NewID()
	picked := false
	// The batch's blobs are read while the claim's journal writes and its
	// commit, which waits for the disk, go on: neither waits for the
	// other, and nothing is sent before both are done. The reads stay
	// outside the claim's transaction (its row locks are held for
	// milliseconds, not for disk reads).
	var read *blobRead
	defer func() {
		if read != nil {
			<-read.done
			read.tb.release() // after the last send: a reader net/http still holds keeps the arena
		}
	}()
	c, err := u.store.ClaimBatch(stopCtx, tilestore.Claim{FlightID: flightID, Limit: lim.tiles, OpID: opID,
		MaxAttempts: maxAttempts, Exclude: claims.skippedIDs(), Order: cur.order, At: takeTurn, Stream: u.stream.Load(),
		// A tile awaiting a lookup goes only if this call's lookup said
		// send, and no run sent it again after that lookup's read.
		LookedUp: lookedUp, LookedUpAt: lookedUpAt,
		Sending: true,
		Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
			// Checked again under the rows' locks: a tile another worker
			// rejected after this claim read Exclude, and whose settlement
			// committed before this claim's SELECT, must not go again.
			b, rs := pick(flightID, opID, claims.unskipped(cands), lim)
			claims.skip(rs)
			cur.advance(tilestore.LastTaken(cands, b, rs)) // the claim's Last, for the next turn
			picked = true
			endTurn()
			read = u.readBlobs(cands, b.TileIDs)
			return b, rs
		}})
	if err == nil && c.Candidates == 0 && !picked && tookTurn {
		// Still within the turn (Pick ends it): the next claim knows what this found.
		if after.IsZero() {
			cur.emptyAt.Store(freed)
		} else {
			cur.emptyAfter, cur.emptyAfterAt = after, freed
		}
	}
	endTurn() // when Pick did not run
	var busy *tilestore.SequenceBusyError
	if errors.As(err, &busy) {
		return u.sequenceBusy(ctx, stopCtx, flightID, busy, rep, claims, due)
	}
	if err != nil {
		if stopCtx.Err() != nil && ctx.Err() == nil {
			return false, nil // another worker ended the run
		}
		return false, fmt.Errorf("claim a batch: %w", err)
	}
	if c.Candidates > 0 {
		defer cur.freed.Add(1) // its tiles may be free again once it ends
	}
	if c.Candidates == 0 {
		if after.IsZero() {
			return false, nil
		}
		if !own.resume.IsZero() {
			own.resume = tilestore.Cursor{} // its leftovers are gone (another worker took them): back to the shared cursor
			return true, nil
		}
		// Nothing after the cursor; tiles behind it may be free again
		// (a failed batch's): look once more from the first tile.
		own.rescan = true
		return true, nil
	}
	own.rescan, own.resume = false, tilestore.Cursor{}
	if !c.Last.IsZero() && c.Left > 0 {
		own.resume = c.Last // its leftovers, before other workers' batches
		// Its leftovers were locked until its commit: a claim that
		// skipped them may have found the call drained, which it is not.
		cur.freed.Add(1)
	}
	rep.local(c.Rejections)
	if c.Batch.OpID == "" {
		return true, nil
	}
	// The blobs are read once: the bytes checked are the bytes sent.
	<-read.done
	if read.err != nil {
		return false, read.err // the batch stays open, its lease released at the end
	}
	send, bad, badIDs, tb := read.send, read.bad, read.badIDs, read.tb
	counted := true // the claim counted the first send (Claim.Sending)
	if len(bad) > 0 {
		counted = false // the trim cleared the count
		// A bad blob is a local failure: the tile leaves the batch unsent,
		// stays pending and uncounted, and this call does not claim it again.
		claims.skipIDs(badIDs)
		if err := u.store.TrimUnsentBatch(stopCtx, batchOf(flightID, c.Batch.OpID, send), nil); err != nil {
			return false, fmt.Errorf("leave %d tile(s) with a bad blob out of batch %s: %w", len(bad), c.Batch.OpID, err)
		}
		for _, lf := range bad {
			u.localFailure(rep, lf)
		}
		if len(send) == 0 {
			return true, nil
		}
	}
	// stopCtx, not ctx: a batch claimed but not yet started when another
	// worker ends the run is not sent (it stays open, to be resent under its
	// key by the next run); one already on the wire finishes and its answer
	// is recorded.
	if err := stopCtx.Err(); err != nil {
		return false, nil // the run ended while the blobs were read; the batch stays open
	}
	err = u.sendBatch(stopCtx, flightID, c.Batch.OpID, seqOf(c.Batch), send, tb, sendOpts{counted: counted}, rep, claims)
	if we := (*waitingError)(nil); errors.As(err, &we) {
		due.hold(we) // it goes when its time comes; this worker claims on
		return true, nil
	}
	if errors.Is(err, errLeftOpen) {
		// It stays this run's until the run ends, and no later pass of
		// this call sends it again: the next call settles it first.
		due.leave(c.Batch.OpID)
		return true, nil
	}
	if err != nil && !errors.Is(err, errSettledElsewhere) {
		return false, err
	}
	return true, nil
}

// blobRead is the reading of a claimed batch's blobs (readBlobs): once
// done is closed, send are the tiles whose bytes tb holds, in the batch's
// order, and bad the local failures of the others; err is a failure to
// read that is not the blob's (see readBlob).
type blobRead struct {
	done   chan struct{}
	tb     *tileBytes
	send   []tilestore.Tile
	bad    []LocalFailure
	badIDs []string
	err    error
}

// readBlobs starts reading, and checking, the blobs of the candidates ids
// names, in the order of ids (a claim's batch). nil when ids is empty.
// The caller waits for done and releases tb.
func (u *Client) readBlobs(cands []tilestore.Tile, ids []string) *blobRead {
	if len(ids) == 0 {
		return nil
	}
	byID := make(map[string]tilestore.Tile, len(cands))
	for _, tl := range cands {
		byID[tl.ID] = tl
	}
	tiles := make([]tilestore.Tile, len(ids))
	for i, id := range ids {
		tiles[i] = byID[id]
	}
	r := &blobRead{done: make(chan struct{}), tb: pooledTileBytes(tiles), send: tiles[:0:0]}
	go func() {
		defer close(r.done)
		for _, tl := range tiles {
			lf, err := r.tb.read(u.blobs, tl)
			if err != nil {
				r.err = err
				return
			}
			if lf != nil {
				r.bad, r.badIDs = append(r.bad, *lf), append(r.badIDs, tl.ID)
				continue
			}
			r.send = append(r.send, tl)
		}
	}()
	return r
}

// pick is a claim's choice among its candidates (tile_id order): tiles over
// the provider's max_tile_bytes are rejected without being sent, the
// others join the batch while it fits max_batch_bytes; the rest are left
// for the next claim.
func pick(flightID, opID string, cands []tilestore.Tile, lim limits) (tilestore.Batch, []tilestore.Rejection) {
	var rejs []tilestore.Rejection
	var members []tilestore.Tile
	var bytes int64 = bodyOverhead
	full := false
	rejOp := ""
	tooLarge := func(tl tilestore.Tile, why string) {
		if rejOp == "" {
			rejOp = operation.NewID()
		}
		rejs = append(rejs, tilestore.Rejection{OpID: rejOp, TileID: tl.ID, Reason: tilestore.ReasonTooLarge, Message: why})
	}
	for _, tl := range cands {
		// A tile that cannot fit is never sent: no batch could carry it.
		cost := tl.SizeBytes + partOverhead(tl)
		switch {
		case tl.SizeBytes > lim.tileBytes:
			tooLarge(tl, fmt.Sprintf("%d bytes is over the provider's max_tile_bytes of %d", tl.SizeBytes, lim.tileBytes))
			continue
		case bodyOverhead+cost > lim.bytes:
			tooLarge(tl, fmt.Sprintf("%d bytes (%d with its request framing) is over the provider's max_batch_bytes of %d even alone in a batch",
				tl.SizeBytes, bodyOverhead+cost, lim.bytes))
			continue
		}
		if full || (len(members) > 0 && (len(members) >= lim.tiles || bytes+cost > lim.bytes)) {
			full = true
			continue
		}
		members = append(members, tl)
		bytes += cost
	}
	if len(members) == 0 {
		return tilestore.Batch{}, rejs
	}
	return batchOf(flightID, opID, members), rejs
}

func batchOf(flightID, opID string, tiles []tilestore.Tile) tilestore.Batch {
	b := tilestore.Batch{OpID: opID, FlightID: flightID, TileIDs: make([]string, len(tiles)), SHA256s: make([]string, len(tiles))}
	for i, tl := range tiles {
		b.TileIDs[i], b.SHA256s[i] = tl.ID, tl.SHA256
	}
	b.Fingerprint = fingerprint(flightID, b.TileIDs, b.SHA256s)
	return b
}

// LeaseLostError says the run could not renew the leases of its open
// batches in time (the database was unreachable for most of a lease), so
// another run may take them over: this run stopped sending. What it sent is
// journaled; the next run settles it with the same keys.
type LeaseLostError struct {
	Lease time.Duration
	Err   error
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("could not renew this run's batch leases (%s) in time: %v; stopped sending so that no other run "+
		"sends the same tiles; nothing sent is lost, run upload-pending again", e.Lease, e.Err)
}

func (e *LeaseLostError) Unwrap() error { return e.Err }

// keepLeases renews this run's leases every third of a lease until
// stopRenewal, also while a cancelled run lets its batches on the wire
// finish. When renewal has failed for two thirds of a lease, it cancels
// the returned context with a *LeaseLostError, before another run could
// take the batches over, and ends every request on the wire (leaseLostOf).
// stopRenewal ends the renewal alone (before the leases are released);
// stop ends it too and cancels the context. Each may be called more than
// once.
func (u *Client) keepLeases(ctx context.Context) (_ context.Context, stopRenewal, stop func()) {
	lease := u.store.Run().Lease
	if lease <= 0 {
		lease = tilestore.DefaultLease
	}
	lctx, cancel := context.WithCancelCause(ctx)
	// lost ends only when the lease is lost: never cancelled otherwise,
	// so that its cause is the loss whatever ended lctx before.
	lost, loseLease := context.WithCancelCause(context.Background())
	lctx = context.WithValue(lctx, leaseLostKey{}, lost)
	// renewing outlives lctx (a cancelled run still renews while its
	// batches on the wire finish) and ends at stopRenewal, which also cuts
	// a renewal in progress.
	renewing, done := context.WithCancel(context.WithoutCancel(lctx))
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(lease / 3)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-renewing.Done():
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(renewing, lease/2)
			_, err := u.store.ExtendLeases(rctx)
			rcancel()
			if err == nil {
				last = time.Now()
				continue
			}
			if renewing.Err() != nil {
				return
			}
			u.log.Warn().Err(err).Msg("could not renew this run's batch leases")
			if time.Since(last) >= lease*2/3 {
				e := &LeaseLostError{Lease: lease, Err: err}
				loseLease(e)
				cancel(e)
				return
			}
		}
	}()
	stopRenewal = sync.OnceFunc(func() {
		done()
		<-finished
	})
	return lctx, stopRenewal, func() {
		stopRenewal()
		cancel(nil)
	}
}

// leaseLostKey carries, from keepLeases to every request of the run, a
// context that ends only when the run's lease is lost. It is a value, not
// the run's context itself, because the contexts a request is sent under
// may have ended before (the run stopped, its claims stopped), and a
// context's cause is its first: the loss must still reach a request that
// a stopped run lets finish.
type leaseLostKey struct{}

// leaseLostOf returns the context that ends when the run's lease is lost,
// or nil outside a run that keeps leases.
func leaseLostOf(ctx context.Context) context.Context {
	c, _ := ctx.Value(leaseLostKey{}).(context.Context)
	return c
}
