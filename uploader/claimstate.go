package uploader

import (
	"slices"
	"sync"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// claimState is what one UploadPendingTiles call's claims go by, shared by
// its workers, its dueBatches and the settling of its batches: the tiles the
// call does not claim again, the tiles awaiting a lookup that it may send
// under a new key, and the sequence numbers the provider called committed
// without an answer. The settling, the lookups and the local failures write
// it; claimAndSend reads it to build each claim (tilestore.Claim's Exclude,
// LookedUp and LookedUpAt); settleCommitted reads the numbers. Nothing in it
// is reported: the counts are runReport's.
type claimState struct {
	mu sync.Mutex
	// skipped lists each tile this call will not claim again (rejected in
	// it: the decorator counts the rejection before the next call; a bad
	// blob; a lookup without a clear answer). Tiles are added before the
	// commit that frees them, so no concurrent worker claims one in
	// between.
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
}

// skip keeps rs's tiles out of this call's later claims. Call it before
// the commit that records the rejections.
func (c *claimState) skip(rs []tilestore.Rejection) {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.TileID
	}
	c.skipIDs(ids)
}

// skipIDs keeps the tiles out of this call's later claims.
func (c *claimState) skipIDs(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.skippedSeen == nil {
		c.skippedSeen = map[string]bool{}
	}
	for _, id := range ids {
		if !c.skippedSeen[id] {
			c.skippedSeen[id] = true
			c.skipped = append(c.skipped, id)
		}
	}
}

// unskipped returns the tiles of ts this call may still claim.
func (c *claimState) unskipped(ts []tilestore.Tile) []tilestore.Tile {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := ts[:0:0]
	for _, tl := range ts {
		if !c.skippedSeen[tl.ID] {
			out = append(out, tl)
		}
	}
	return out
}

// skippedIDs returns the tiles this call does not claim again.
func (c *claimState) skippedIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.skipped[:len(c.skipped):len(c.skipped)]
}

// setLookedUp records the tiles this call's lookup found not held, and when
// it read them.
func (c *claimState) setLookedUp(ids []string, asOf time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookedUp, c.lookedUpAt = ids, asOf
}

// lookedUpIDs returns the tiles awaiting a lookup that this call may send,
// and when the lookup read them.
func (c *claimState) lookedUpIDs() ([]string, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookedUp[:len(c.lookedUp):len(c.lookedUp)], c.lookedUpAt
}

// answered records that the provider answered one of the call's batches:
// the numbers called committed before it are no longer in a row.
func (c *claimState) answered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.committedInARow = nil
}

// sequenceCommitted records that the provider called number n committed
// without its batch's answer; held says whether the lookup after it found
// tiles the provider holds (the number was this client's: its answer was
// lost). It returns the numbers called committed, holding nothing, since
// the last batch the provider answered or tile it held.
func (c *claimState) sequenceCommitted(n uint64, held bool) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if held {
		c.committedInARow = nil
		return nil
	}
	c.committedInARow = append(c.committedInARow, n)
	return slices.Clone(c.committedInARow)
}
