package uploader_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// storingAgain is a provider that stores a tile again under every new key
// instead of answering duplicate (the contract does not forbid it), so a
// tile sent under two keys is seen stored twice; its capabilities cut a
// batch at 4 tiles.
func storingAgain(t *testing.T) *providertest.Recorder {
	return providertest.StartRecorder(t, providertest.RecorderConfig{MaxBatchTiles: 4})
}

// Issue 9 item 10: tiles whose batch could not be settled under its key
// (the answer lost, then the key expired; or the answer left a tile out)
// are looked up at the provider before they are sent again: those it holds
// with the same sha256 are marked uploaded, and none is stored twice.
func TestTileTheProviderHoldsIsNotSentAgainUnderANewKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lose func() func(key string, ids []string) string
	}{
		{"answer lost then key expired", func() func(string, []string) string {
			first := true
			return func(key string, ids []string) string {
				if first {
					first = false
					return "drop"
				}
				return ""
			}
		}},
		{"result omitted", func() func(string, []string) string {
			first := true
			return func(key string, ids []string) string {
				if first {
					first = false
					return "omit:" + ids[0]
				}
				return ""
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := storingAgain(t)
			p.LoseAnswers(tc.lose())
			c := providertest.NewClient(t, "fd")
			c.AddTiles(t, "fd", 4, 256, 6) // one batch
			u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.MaxResends = 1 })
			for run := 1; run <= 3 && c.Counts(t, "fd")[tilestore.StatusUploaded] < 4; run++ {
				_, _ = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd", Concurrency: 1})
			}
			if twice := p.StoredTwice(); len(twice) > 0 {
				t.Errorf("tiles stored twice under two keys: %s", strings.Join(twice, ", "))
			}
			if n := c.Counts(t, "fd")[tilestore.StatusUploaded]; n != 4 {
				t.Errorf("%d of 4 tiles uploaded", n)
			}
			if p.Lookups() == 0 {
				t.Errorf("the provider was never asked")
			}
		})
	}
}

// Two runs share a flight: run A's batch fails (its key expired) while
// run B works on the same flight. B's claims must not send A's tiles
// under a new key without asking the provider first: this provider stores a
// tile again under every new key. The next run asks, and marks them uploaded.
func TestATileAwaitingLookUpIsNeverClaimedByAnotherRun(t *testing.T) {
	t.Parallel()
	p := storingAgain(t)
	c := providertest.NewClient(t, "fa")
	tiles := c.AddTiles(t, "fa", 8, 256, 7) // two batches of 4
	ctx := testCtx(t)
	a := c.Store.ForRun(tilestore.Run{ID: "run-a", Lease: time.Minute})
	ca, err := a.ClaimBatch(ctx, tilestore.Claim{FlightID: "fa", Limit: 4, OpID: "op-run-a",
		Pick: pickAll("op-run-a", "fp-run-a")})
	if err != nil || len(ca.Tiles) != 4 {
		t.Fatalf("run A's claim: %+v %v", ca, err)
	}
	// A's send stored its tiles; its answer was lost.
	for _, tl := range ca.Tiles {
		p.Hold(tl.ID, tl.SHA256, int(tl.SizeBytes))
	}
	first := true
	p.LoseAnswers(func(key string, ids []string) string {
		if first { // while B's first batch is on the wire, A's key expires
			first = false
			if err := a.FailBatch(ctx, ca.Batch.OpID, 422, "key expired"); err != nil {
				t.Errorf("fail run A's batch: %v", err)
			}
		}
		return ""
	})
	u, _ := newUploader(t, p.URL, c, nil)
	if _, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fa", Concurrency: 1}); err != nil {
		t.Fatalf("run B: %v", err)
	}
	if twice := p.StoredTwice(); len(twice) > 0 {
		t.Fatalf("run B sent run A's tiles under a new key unasked; stored twice: %s", strings.Join(twice, ", "))
	}
	if _, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fa", Concurrency: 1}); err != nil {
		t.Fatalf("the next run: %v", err)
	}
	if twice := p.StoredTwice(); len(twice) > 0 {
		t.Errorf("tiles stored twice: %s", strings.Join(twice, ", "))
	}
	if n := c.Counts(t, "fa")[tilestore.StatusUploaded]; n != int64(len(tiles)) {
		t.Errorf("%d of %d tiles uploaded", n, len(tiles))
	}
}
