package tiles

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// A lookup the provider answers with what the contract makes final (a 4xx
// other than 429, a 404 that is not its TILE_NOT_FOUND, a resend it
// forbids) is not asked again by reconcile: the uploader's classifier does
// not resend it, and asking again after a pause gets the same answer. A
// lookup that went unanswered while the provider was busy is asked again.
func TestReconcileAsksAgainOnlyWhatTheClassifierWouldResend(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "rf")
	tiles := c.AddTiles(t, "rf", 5, 512, 1)
	answers := map[string]func(w http.ResponseWriter){
		tiles[0].ID: func(w http.ResponseWriter) {
			operation.WriteError(w, http.StatusBadRequest, operation.CodeInvalidRequest, "no", nil, nil)
		},
		tiles[1].ID: func(w http.ResponseWriter) { http.Error(w, "404 page not found", http.StatusNotFound) },
		tiles[2].ID: func(w http.ResponseWriter) {
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "down", &operation.RetryExtension{Allowed: false}, nil)
		},
		tiles[3].ID: func(w http.ResponseWriter) {
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "busy", nil, nil)
		},
	}
	var mu sync.Mutex
	asked := map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/flights/{flight}/tiles/{tile}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("tile")
		mu.Lock()
		asked[id]++
		mu.Unlock()
		if a, ok := answers[id]; ok {
			a(w)
			return
		}
		for _, tl := range tiles {
			if tl.ID == id {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"tile_id": id, "sha256": tl.SHA256, "size": tl.SizeBytes})
			}
		}
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	u, err := uploader.NewClient(uploader.ClientOptions{BaseURL: hs.URL, Token: providertest.Token, Store: c.Store, Blobs: c.Blobs,
		Logger: zerolog.Nop(), RequestTimeout: 5 * time.Second, MaxResends: 1,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	if err != nil {
		t.Fatal(err)
	}
	var waited []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		waited = append(waited, d)
		return ctx.Err()
	}
	r := &reconciler{opts: &ReconcileOptions{FlightID: "rf", Sleep: sleep}, pace: newAIMD(reconcileStartLookups, reconcileMaxLookups)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, found, err := r.checkPage(ctx, u, tiles)
	if err != nil {
		t.Fatal(err)
	}
	if held != 1 || len(found) != 4 {
		t.Fatalf("held %d, found %+v; want 1 held and 4 unclear", held, found)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 3 {
		if got := asked[tiles[i].ID]; got != 1 {
			t.Errorf("tile %d, answered with a final answer, was asked %d times, want once", i, got)
		}
	}
	// The busy tile: each round's lookup is sent and resent once.
	if got, want := asked[tiles[3].ID], 2*(1+len(reconcileUnclearWaits)); got != want {
		t.Errorf("the busy tile was asked %d times, want %d (each round sends it and resends it once)", got, want)
	}
	if !slices.Equal(waited, reconcileUnclearWaits) {
		t.Errorf("waited %v before asking again, want %v", waited, reconcileUnclearWaits)
	}
}
