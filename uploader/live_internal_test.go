package uploader

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

// An open batch that only its operation state can settle, found live, is
// asked about again after the contract's wait for a key in progress (409
// IDEMPOTENCY_PROCESSING: 1 s), and settles from the sealed answer.
func TestALiveOperationIsAskedAgainAfterTheContractsWaitForAKeyInProgress(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "flv")
	c.AddTiles(t, "flv", 3, 512, 73)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	journaled := journalOpen(ctx, t, c, "flv", 3)
	op := journaled.OpID
	var mu sync.Mutex
	reads := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/operations/{op}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reads++
		n := reads
		mu.Unlock()
		st := map[string]any{"op_id": op, "state": "live"}
		if n == 3 {
			var res []map[string]string
			for _, id := range journaled.TileIDs {
				res = append(res, map[string]string{"tile_id": id, "status": "accepted"})
			}
			st = map[string]any{"op_id": op, "state": "sealed",
				"outcome": map[string]any{"status": 200, "body": map[string]any{"op_id": op, "results": res}}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	var slept []time.Duration
	u, err := NewClient(ClientOptions{BaseURL: hs.URL, Token: providertest.Token, Store: c.Store, Blobs: c.Blobs,
		Logger: zerolog.Nop(), RequestTimeout: 10 * time.Second,
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			slept = append(slept, d)
			mu.Unlock()
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	rep, claims := newRunReport("flv", u.now(), nil, nil), &claimState{}
	// No members: the batch cannot be resent, only its state settles it.
	if err := u.settleAdopted(ctx, "flv", journaled, map[string]tilestore.Tile{}, sendOpts{}, rep, claims); err != nil {
		t.Fatalf("settle a batch whose operation is live, then sealed: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 3 || len(slept) != 2 || slept[0] != time.Second || slept[1] != time.Second {
		t.Fatalf("%d reads, waits %v; want 3 reads with 1 s before each read again", reads, slept)
	}
	if got := c.Counts(t, "flv")[tilestore.StatusUploaded]; got != 3 {
		t.Fatalf("uploaded = %d, want the 3 tiles the sealed answer accepted", got)
	}
}
