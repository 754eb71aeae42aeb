package retrydecorator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// Issue 9 item 9: a tile that cannot fit the provider's advertised limits
// (over max_tile_bytes, or alone over max_batch_bytes) is never sent and
// is given up at once, reason too_large with its size and the limit, with
// its FDR record: no retry can help.
func TestTileThatCannotFitTheProvidersLimitsIsGivenUpAtOnceAndNeverSent(t *testing.T) {
	t.Parallel()
	const fl = "fl"
	c := providertest.NewClient(t, fl)
	small := c.AddTilesFrom(t, fl, 0, 3, 512, 1)
	overTile := c.AddTilesFrom(t, fl, 3, 1, 80<<10, 2)[0]  // over max_tile_bytes
	overBatch := c.AddTilesFrom(t, fl, 4, 1, 20<<10, 3)[0] // under max_tile_bytes, alone over max_batch_bytes
	p := providertest.Start(t, func(cfg *provider.Config) {
		cfg.Limits = provider.Limits{MaxTileBytes: 64 << 10, MaxBatchBytes: 20 << 10}
	})
	var mu sync.Mutex
	var sentLarge, tooLarge413 int
	h := p.Server.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			mu.Lock()
			if bytes.Contains(body, []byte(overTile.ID)) || bytes.Contains(body, []byte(overBatch.ID)) {
				sentLarge++
			}
			mu.Unlock()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			mu.Lock()
			if rec.Code == http.StatusRequestEntityTooLarge {
				tooLarge413++
			}
			mu.Unlock()
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)

	rec := &memRecorder{}
	u := New(httpInner(t, c, hs.URL), c.Store, rec, zerolog.Nop(), &fakeClock{now: t0}, defaultConfig(), Hooks{})
	rep, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: fl, Concurrency: 2})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if sentLarge != 0 || tooLarge413 != 0 {
		t.Errorf("tiles that cannot fit were sent %d time(s), %d answered 413", sentLarge, tooLarge413)
	}
	if rep.GivenUp != 2 || rep.Accepted != len(small) || rep.RetryCount != 0 {
		t.Errorf("report: given up %d, accepted %d, retries %d; want 2, %d, 0", rep.GivenUp, rep.Accepted, rep.RetryCount, len(small))
	}
	got, err := c.Store.TilesByID(context.Background(), []string{overTile.ID, overBatch.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range got {
		if tl.VotingStatus != tilestore.StatusUploadGiveup || tl.UploadAttempts != 1 {
			t.Errorf("tile %s is %s at %d attempts, want upload_giveup at 1", tl.ID, tl.VotingStatus, tl.UploadAttempts)
		}
	}
	assertWithinBudget(t, c, fl, defaultConfig().MaxPerTileAttempts)
	if len(rec.records) != 2 {
		t.Fatalf("FDR records %d, want one per give-up", len(rec.records))
	}
	for _, r := range rec.records {
		var pl GiveUpPayload
		if err := json.Unmarshal(r.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		limit := "max_tile_bytes of 65536"
		if pl.TileID == overBatch.ID {
			limit = "max_batch_bytes of 20480"
		}
		if pl.LastRejectionReason != "too_large" || !strings.Contains(pl.LastRejectionMessage, limit) {
			t.Errorf("FDR record of %s: reason %q message %q; want too_large naming its size and the %s",
				pl.TileID, pl.LastRejectionReason, pl.LastRejectionMessage, limit)
		}
	}
}
