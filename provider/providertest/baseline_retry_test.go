package providertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// The contract-following baseline resends a batch under its key only after
// the wait its answer advised, and gives its worker to the other batches
// meanwhile; a batch whose answer was lost goes again at once, under its
// key, and the provider's replay settles it.
func TestBaselineUploadRetryingWaitsWhatTheAnswerSaysAndNoMore(t *testing.T) {
	const after = 200 * time.Millisecond
	sink := StartSink(t)
	type send struct {
		key string
		at  time.Time
	}
	var mu sync.Mutex
	var sends []send
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			sink.ServeHTTP(w, r)
			return
		}
		key := r.Header.Get(operation.HeaderIdempotencyKey)
		mu.Lock()
		sends = append(sends, send{key, time.Now()})
		n := len(sends)
		mu.Unlock()
		switch n {
		case 1: // the first batch is told to come back later
			operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: after, Strategy: operation.StrategyFixed}, nil)
		case 2: // the second is stored, and its answer lost
			sink.ServeHTTP(httptest.NewRecorder(), r)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		default:
			sink.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	c := NewClient(t, "fb")
	tiles := c.AddTiles(t, "fb", 2, 512, 3)
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

	err := BaselineUploadRetrying(context.Background(), client, hs.URL, Token, "fb", c.Blobs,
		[][]tilestore.Tile{tiles[:1], tiles[1:]}, 1)
	if err != nil {
		t.Fatalf("baseline: %v", err)
	}
	if got := sink.Tiles.Load(); got != 2 {
		t.Errorf("sink stored %d tiles, want 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sends) != 4 {
		t.Fatalf("%d sends, want 4", len(sends))
	}
	first, lost, again, last := sends[0], sends[1], sends[2], sends[3]
	if lost.key == first.key || again.key != lost.key || last.key != first.key {
		t.Fatalf("sends %v: want the advised batch, the other one twice (its answer lost), then the advised one again", sends)
	}
	if d := last.at.Sub(first.at); d < after {
		t.Errorf("the advised batch went again after %v, before its %v", d, after)
	}
	if d := again.at.Sub(lost.at); d >= after {
		t.Errorf("a lost answer's batch went again after %v; the contract sets no wait", d)
	}
}
