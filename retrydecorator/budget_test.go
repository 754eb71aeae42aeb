package retrydecorator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// droppingProvider fronts the reference provider; while drop is set, every
// batch is run and sealed by the provider and then its connection is cut
// before the answer, as a deadline or a broken link would.
func droppingProvider(t *testing.T, reject []string) (*httptest.Server, *atomic.Bool) {
	t.Helper()
	p := providertest.Start(t, func(c *provider.Config) { c.Faults.RejectTileIDs = reject })
	var drop atomic.Bool
	h := p.Server.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !drop.Load() || r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(hs.Close)
	return hs, &drop
}

func httpInner(t *testing.T, c *providertest.Client, baseURL string) *uploader.Client {
	t.Helper()
	u, err := uploader.NewClient(uploader.ClientOptions{BaseURL: baseURL, Token: providertest.Token,
		Store: c.Store, Blobs: c.Blobs, Logger: zerolog.Nop(), MaxResends: 1, RequestTimeout: 10 * time.Second,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func assertWithinBudget(t *testing.T, c *providertest.Client, flightID string, budget int) {
	t.Helper()
	over, err := pgtest.RejectionsOverBudget(context.Background(), c.Store.Pool(), flightID, budget)
	if err != nil {
		t.Fatal(err)
	}
	if len(over) > 0 {
		t.Errorf("tiles rejected by more distinct operations than the budget of %d: %v", budget, over)
	}
}

// Issue 9 item 1: the fifth rejection of a tile arrives by settling an
// earlier run's open batch. It must be counted before any new batch forms,
// so the tile gives up at its budget and is never sent under a sixth key.
func TestTileAtBudgetIsNeverSentAgain(t *testing.T) {
	t.Parallel()
	const fl = "fb"
	c := providertest.NewClient(t, fl)
	tiles := c.AddTiles(t, fl, 3, 256, 9)
	bad := tiles[0].ID
	hs, drop := droppingProvider(t, []string{bad})
	cfg := defaultConfig()
	cfg.MaxInCallRetries = 0 // one inner call per run
	rec := &memRecorder{}
	u := New(httpInner(t, c, hs.URL), c.Store, rec, zerolog.Nop(), &fakeClock{now: t0}, cfg, Hooks{})
	ctx := context.Background()
	req := uploader.Request{FlightID: fl, Concurrency: 1}

	for run := 1; run < cfg.MaxPerTileAttempts; run++ {
		if _, err := u.UploadPendingTiles(ctx, req); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	// The fifth rejection is sealed by the provider, its answer lost.
	drop.Store(true)
	if _, err := u.UploadPendingTiles(ctx, req); err == nil {
		t.Fatal("run with the answer lost: no error, want the provider unreachable")
	}
	drop.Store(false)
	rep, err := u.UploadPendingTiles(ctx, req)
	if err != nil {
		t.Fatalf("run settling the open batch: %v", err)
	}

	assertWithinBudget(t, c, fl, cfg.MaxPerTileAttempts)
	got, err := c.Store.TilesByID(ctx, []string{bad})
	if err != nil || len(got) != 1 {
		t.Fatalf("read tile %s: %v", bad, err)
	}
	if got[0].VotingStatus != tilestore.StatusUploadGiveup || got[0].UploadAttempts != cfg.MaxPerTileAttempts {
		t.Errorf("tile %s is %s at %d attempts, want upload_giveup at %d",
			bad, got[0].VotingStatus, got[0].UploadAttempts, cfg.MaxPerTileAttempts)
	}
	if rep.GivenUp != 1 || len(rec.records) != 1 {
		t.Errorf("given up %d, FDR records %d; want 1 and 1", rep.GivenUp, len(rec.records))
	}
}
