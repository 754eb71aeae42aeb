package provider_test

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

func TestIdempotencyRowsOverHTTP(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	p := providertest.Start(t, func(c *provider.Config) {
		c.Retention = time.Hour
		c.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	rng := rand.New(rand.NewSource(1))
	tiles := []rawTile{tileN(rng, 0), tileN(rng, 1)}
	key := operation.NewID()

	first := post(t, p, "f1", key, tiles)
	if first.Status != 200 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("new key: %d %s", first.Status, first.Body)
	}
	if r := first.results(t); r["t-0000"] != "accepted:" || r["t-0001"] != "accepted:" {
		t.Fatalf("new key results %v", r)
	}

	t.Run("finished key, same body: the stored answer byte for byte", func(t *testing.T) {
		again := post(t, p, "f1", key, tiles)
		if again.Status != 200 || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %s (replayed=%q)", again.Status, again.Body, again.Header.Get("Idempotent-Replayed"))
		}
	})
	t.Run("known key, different body: 422 conflict", func(t *testing.T) {
		other := post(t, p, "f1", key, []rawTile{tiles[0]})
		if other.Status != 422 || other.code() != operation.CodeIdempotencyConflict {
			t.Fatalf("conflict: %d %s", other.Status, other.Body)
		}
	})
	t.Run("new key, tiles already held: duplicate, not stored again", func(t *testing.T) {
		dup := post(t, p, "f1", operation.NewID(), tiles)
		if r := dup.results(t); r["t-0000"] != "duplicate:" || r["t-0001"] != "duplicate:" {
			t.Fatalf("duplicate results %v", r)
		}
		for id, n := range writes(t, p) {
			if n != 1 {
				t.Fatalf("tile %s written %d times", id, n)
			}
		}
	})
	t.Run("operation state: sealed with the outcome, unknown absent", func(t *testing.T) {
		st := do(t, http.MethodGet, p.URL+"/v1/operations/"+key, providertest.Token, "", nil, nil)
		var s operation.StateResponse
		if err := json.Unmarshal(st.Body, &s); err != nil || s.State != "sealed" || s.Outcome == nil || s.Outcome.Status != 200 {
			t.Fatalf("state: %d %s", st.Status, st.Body)
		}
		st = do(t, http.MethodGet, p.URL+"/v1/operations/"+operation.NewID(), providertest.Token, "", nil, nil)
		if json.Unmarshal(st.Body, &s) != nil || s.State != "absent" {
			t.Fatalf("unknown: %s", st.Body)
		}
	})
	t.Run("tile lookup", func(t *testing.T) {
		got := do(t, http.MethodGet, p.URL+"/v1/flights/f1/tiles/t-0001", providertest.Token, "", nil, nil)
		var tl struct{ SHA256 string }
		if json.Unmarshal(got.Body, &tl) != nil || tl.SHA256 != providertest.SHA256(tiles[1].Data) {
			t.Fatalf("lookup: %d %s", got.Status, got.Body)
		}
		if nf := do(t, http.MethodGet, p.URL+"/v1/flights/f1/tiles/nope", providertest.Token, "", nil, nil); nf.Status != 404 || nf.code() != operation.CodeTileNotFound {
			t.Fatalf("missing tile: %d %s", nf.Status, nf.Body)
		}
	})
	t.Run("expired key: 422, never run as new", func(t *testing.T) {
		clock.Add(int64(2 * time.Hour))
		old := post(t, p, "f1", key, tiles)
		if old.Status != 422 || old.code() != operation.CodeIdempotencyExpired {
			t.Fatalf("expired: %d %s", old.Status, old.Body)
		}
	})
}

func TestResendOfABatchInProgressIsAnswered409(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	p := providertest.Start(t, func(c *provider.Config) {
		c.WaitLive = -1
		c.BeforeRun = func(string) {
			started <- struct{}{}
			<-release
		}
	})
	rng := rand.New(rand.NewSource(2))
	tiles := []rawTile{tileN(rng, 0)}
	key := operation.NewID()
	var wg sync.WaitGroup
	var first answer
	wg.Add(1)
	go func() { defer wg.Done(); first = post(t, p, "f1", key, tiles) }()
	<-started
	busy := post(t, p, "f1", key, tiles)
	close(release)
	wg.Wait()
	if busy.Status != 409 || busy.code() != operation.CodeIdempotencyProcessing {
		t.Fatalf("in progress: %d %s", busy.Status, busy.Body)
	}
	if first.Status != 200 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
}
