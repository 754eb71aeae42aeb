package uploader

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// adoptHook is a Store whose AdoptOpenBatches runs after once the
// adoption has committed, before settleOpen sees its result.
type adoptHook struct {
	Store
	after func()
}

func (s adoptHook) AdoptOpenBatches(ctx context.Context, flightID string, dead []string) ([]tilestore.Batch, error) {
	bs, err := s.Store.AdoptOpenBatches(ctx, flightID, dead)
	if s.after != nil {
		s.after()
	}
	return bs, err
}

// A batch the call's dueBatches holds is left to it by settleOpen even when
// due finishes it (here: fails it) between the adoption and the filter:
// settleOpen must not take the stale open row it adopted for a batch to
// send, or the failed batch's key would run again at the provider while
// its tiles are free for a new key.
func TestSettleOpenLeavesABatchDueFinishesDuringTheAdoptionToDue(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fsh")
	c.AddTiles(t, "fsh", 3, 512, 71)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	journaled := journalOpen(ctx, t, c, "fsh", 3)
	op := journaled.OpID
	var due *dueBatches
	store := adoptHook{Store: c.Store, after: func() {
		// due's goroutine fails the batch and lets it go, right after
		// the adoption read it as open.
		if err := c.Store.FailBatch(ctx, op, 422, "failed by the goroutine that held it"); err != nil {
			t.Errorf("fail the held batch: %v", err)
		}
		due.mu.Lock()
		delete(due.held, op)
		due.mu.Unlock()
	}}
	u, err := NewClient(ClientOptions{BaseURL: p.URL, Token: providertest.Token, Store: store, Blobs: c.Blobs,
		Logger: zerolog.Nop(), RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rep, claims := newRunReport("fsh", u.now(), nil, nil), &claimState{}
	g := concurrency.NewFixed(1)
	due = newDueBatches(ctx, u, "fsh", rep, claims, g)
	due.held = map[string]bool{op: true}
	settled, err := u.settleOpen(ctx, "fsh", nil, rep, claims, nil, due, g)
	if err != nil || settled != 0 {
		t.Fatalf("settleOpen settled %d, err %v; want the batch due held left to it", settled, err)
	}
	if l := p.Ledger(t); len(l.Tiles) != 0 {
		t.Fatalf("the provider holds %d tiles: the batch due failed was sent again under its key", len(l.Tiles))
	}
}

// A batch another goroutine or run settled or failed after this one read
// it as open is not sent: NoteSend refuses it before the request goes, and
// the sender takes that as nothing left to do.
func TestABatchNoLongerOpenIsNotSentAgain(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fno")
	c.AddTiles(t, "fno", 3, 512, 72)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	journaled := journalOpen(ctx, t, c, "fno", 3)
	op := journaled.OpID
	if err := c.Store.FailBatch(ctx, op, 422, "failed elsewhere"); err != nil {
		t.Fatal(err)
	}
	u, err := NewClient(ClientOptions{BaseURL: p.URL, Token: providertest.Token, Store: c.Store, Blobs: c.Blobs,
		Logger: zerolog.Nop(), RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rep, claims := newRunReport("fno", u.now(), nil, nil), &claimState{}
	members, err := u.loadMembers(ctx, "fno", []tilestore.Batch{journaled})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.settleAdopted(ctx, "fno", journaled, members, sendOpts{}, rep, claims); err != nil {
		t.Fatalf("settle a batch failed meanwhile: %v; want nothing to do", err)
	}
	if l := p.Ledger(t); len(l.Tiles) != 0 {
		t.Fatalf("the provider holds %d tiles: a failed batch's key went on the wire again", len(l.Tiles))
	}
}
