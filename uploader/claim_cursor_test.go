package uploader_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// A worker claims after the last tile of its previous claim; tiles freed
// behind it during the call (here another run's batch, settled with clear
// rejections while this run's first batch is at the provider) are still
// sent in the same call, by the claim from the first tile a worker makes
// before it stops.
func TestTilesFreedBehindAWorkersClaimCursorAreSentInTheSameCall(t *testing.T) {
	t.Parallel()
	const fl = "fc"
	c := providertest.NewClient(t, fl)
	tiles := c.AddTiles(t, fl, 8, 256, 17)
	ctx := testCtx(t)
	other := c.Store.ForRun(tilestore.Run{ID: "run-other", Lease: time.Hour})
	claimed, err := other.ClaimBatch(ctx, tilestore.Claim{FlightID: fl, Limit: 4, OpID: "op-run-other",
		Pick: pickAll("op-run-other", "fp-run-other")})
	if err != nil || len(claimed.Tiles) != 4 || claimed.Tiles[0].ID != tiles[0].ID {
		t.Fatalf("the other run's claim: %+v %v; want the first 4 tiles", claimed, err)
	}
	var settleOther sync.Once
	p := providertest.Start(t, func(cfg *provider.Config) {
		cfg.BeforeRun = func(string) {
			settleOther.Do(func() {
				st := tilestore.Settlement{OpID: claimed.Batch.OpID, HTTPStatus: 200}
				for _, tl := range claimed.Tiles {
					st.Rejections = append(st.Rejections, tilestore.Rejection{OpID: st.OpID, TileID: tl.ID, Reason: "bad_tile"})
				}
				if err := other.SettleBatch(context.Background(), st); err != nil {
					t.Errorf("settle the other run's batch: %v", err)
				}
			})
		}
	})
	u, _ := newUploader(t, p.URL, c, nil)
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: fl, BatchSize: 2, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != uploader.OutcomeSuccess || rep.Pending != 0 || rep.Accepted != len(tiles) {
		t.Fatalf("report %+v; want all %d tiles accepted in this call, none pending", rep, len(tiles))
	}
	allUploadedOnce(t, c, p, fl, len(tiles))
}

// turnStore records how many of a call's claims are between their start
// (the read of their cursor: At, when the claim has one) and their pick at
// once, and where each started. Its picks take a while, so that claims
// that did not take turns would overlap.
type turnStore struct {
	*tilestore.Store
	mu       sync.Mutex
	between  int
	overlaps int
	// entered counts the claims between their call and their pick (or
	// return), which hold or wait for a connection; mostEntered is the
	// most there were at once.
	entered, mostEntered int
	lastPick             tilestore.Cursor   // the last tile any pick took
	behind               []tilestore.Cursor // claims that started before the last tile an earlier pick took
}

func (s *turnStore) ClaimBatch(ctx context.Context, c tilestore.Claim) (tilestore.Claimed, error) {
	s.mu.Lock()
	s.entered++
	s.mostEntered = max(s.mostEntered, s.entered)
	s.mu.Unlock()
	left := false
	leave := func() {
		if !left {
			left = true
			s.entered--
		}
	}
	started := false
	start := func(after tilestore.Cursor) {
		s.mu.Lock()
		started = true
		s.between++
		if s.between > 1 {
			s.overlaps++
		}
		if !after.IsZero() && c.Order.Less(after, s.lastPick) {
			s.behind = append(s.behind, after)
		}
		s.mu.Unlock()
	}
	if at := c.At; at != nil {
		c.At = func() tilestore.Cursor {
			after := at()
			start(after)
			return after
		}
	} else {
		start(c.After)
	}
	picked := false
	pick := c.Pick
	c.Pick = func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
		time.Sleep(5 * time.Millisecond)
		// Before the uploader's pick, which ends its turn: the next claim
		// may start as soon as it returns.
		s.mu.Lock()
		s.between--
		picked = true
		leave()
		s.mu.Unlock()
		b, rs := pick(cands)
		s.mu.Lock()
		if last := tilestore.LastTaken(cands, b, rs); c.Order.Less(s.lastPick, last) {
			s.lastPick = last
		}
		s.mu.Unlock()
		return b, rs
	}
	got, err := s.Store.ClaimBatch(ctx, c)
	s.mu.Lock()
	if started && !picked {
		s.between--
	}
	leave()
	s.mu.Unlock()
	return got, err
}

// A call's workers take turns from reading the shared claim cursor to
// their pick: a claim that started while another's had not picked yet
// would start where the other did and walk past every row it had locked.
// Each claim starts after the last tile any earlier claim took, and only
// the next claim in line gets its connection while a claim has the turn.
func TestAWorkersClaimStartsAfterThePickOfTheClaimBeforeIt(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "ft")
	c.AddTiles(t, "ft", 60, 256, 19)
	store := &turnStore{Store: c.Store}
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.Store = store })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "ft", BatchSize: 4, Concurrency: 4})
	if err != nil || rep.Accepted != 60 {
		t.Fatalf("report %+v, %v; want 60 accepted", rep, err)
	}
	allUploadedOnce(t, c, p, "ft", 60)
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.overlaps != 0 {
		t.Errorf("%d claims started while another claim of the call had not picked yet", store.overlaps)
	}
	if len(store.behind) != 0 {
		t.Errorf("claims started after %v, behind the last tile an earlier claim took", store.behind)
	}
	// The claim whose turn it is, and the next one, with its connection
	// and its transaction begun: no more hold the pool's connections
	// while they wait.
	if store.mostEntered > 2 {
		t.Errorf("%d claims at once held or waited for a connection before their pick; want at most 2", store.mostEntered)
	}
}
