package retrydecorator

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// Only a clear "rejected" spends a tile's attempt budget.
// Budget 3; the tile is rejected storage_busy twice; under a third key the
// provider stores it but its 200 does not clearly answer it. The tile is
// settled by asking the provider, which holds it: it is uploaded, its
// attempts stay at 2, and nothing is given up or written to the FDR.
func TestAnUnclearAnswerForATileTheProviderHoldsDoesNotSpendItsBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode func(tileID string) string
	}{
		{"omitted", func(id string) string { return "omit:" + id }},
		{"named twice", func(id string) string { return "twice:" + id }},
		{"unknown status", func(id string) string { return "status:" + id }},
		{"another operation named", func(string) string { return "otherop" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const fl = "fu"
			p := providertest.StartRecorder(t, providertest.RecorderConfig{})
			c := providertest.NewClient(t, fl)
			tiles := c.AddTiles(t, fl, 3, 256, 21)
			busy := tiles[0].ID
			p.Busy(busy, 2)
			carried := 0 // keys that carried the busy tile (lose runs once per new key)
			p.LoseAnswers(func(_ string, ids []string) string {
				for _, id := range ids {
					if id == busy {
						if carried++; carried == 3 {
							return tc.mode(busy)
						}
					}
				}
				return ""
			})
			cfg := defaultConfig()
			cfg.MaxPerTileAttempts = 3
			rec, _ := openRing(t, 1<<20)
			u := New(httpInner(t, c, p.URL), c.Store, rec, zerolog.Nop(), &fakeClock{now: t0}, cfg, Hooks{})
			rep, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: fl, Concurrency: 1})
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if got := p.Carried()[busy]; got != 3 {
				t.Fatalf("the busy tile travelled under %d keys, want 3 (the scenario)", got)
			}
			got, err := c.Store.TilesByID(context.Background(), []string{busy})
			if err != nil || len(got) != 1 {
				t.Fatalf("read tile %s: %v", busy, err)
			}
			if got[0].VotingStatus != tilestore.StatusUploaded || got[0].UploadAttempts != 2 {
				t.Errorf("tile %s is %s at %d attempts, want uploaded at 2 (the provider holds it)",
					busy, got[0].VotingStatus, got[0].UploadAttempts)
			}
			if rep.GivenUp != 0 || rep.FDRRecords != 0 || rep.Pending != 0 {
				t.Errorf("given up %d, FDR records %d, pending %d; want 0, 0, 0", rep.GivenUp, rep.FDRRecords, rep.Pending)
			}
			if stores := p.Stores()[busy]; stores != 1 {
				t.Errorf("the provider stored the tile %d times, want once", stores)
			}
		})
	}
}
