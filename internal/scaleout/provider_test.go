package scaleout_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const token = "scale-out-token-never-printed-4b1d"

// keyProvider follows provider-api.md's batch contract over real HTTP, and
// stores a tile again whenever a new key carries it (it never answers
// duplicate), so a tile sent under two keys shows as stored twice. A key
// seen before replays its sealed answer. Every batch takes latency; tiles in
// reject are always rejected.
type keyProvider struct {
	latency time.Duration
	reject  func(tileID string) bool

	mu      sync.Mutex
	stores  map[string]int    // tile_id -> times stored
	carried map[string]int    // tile_id -> keys that carried it
	answers map[string][]byte // key -> sealed answer
	keyMu   map[string]*sync.Mutex
	posts   int
}

func startKeyProvider(t testing.TB, latency time.Duration, reject func(string) bool) (*keyProvider, string) {
	t.Helper()
	if reject == nil {
		reject = func(string) bool { return false }
	}
	p := &keyProvider{latency: latency, reject: reject, stores: map[string]int{}, carried: map[string]int{},
		answers: map[string][]byte{}, keyMu: map[string]*sync.Mutex{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"api_version": "v1", "max_batch_tiles": 256, "max_batch_bytes": 32 << 20,
			"max_tile_bytes": 4 << 20, "idempotency": map[string]any{"retention_seconds": 86400}})
	})
	mux.HandleFunc("POST /v1/flights/{flight}/tiles:batch", p.batch)
	mux.HandleFunc("GET /v1/operations/{op}", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		ans, ok := p.answers[r.PathValue("op")]
		p.mu.Unlock()
		if !ok {
			writeJSON(w, 200, map[string]any{"op_id": r.PathValue("op"), "state": "absent"})
			return
		}
		writeJSON(w, 200, map[string]any{"op_id": r.PathValue("op"), "state": "sealed",
			"outcome": map[string]any{"status": 200, "body": json.RawMessage(ans)}})
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			writeJSON(w, 401, map[string]any{"errors": []any{map[string]any{"code": "UNAUTHENTICATED", "message": "bad token"}}})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (p *keyProvider) batch(w http.ResponseWriter, r *http.Request) {
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	p.mu.Lock()
	p.posts++
	km := p.keyMu[key]
	if km == nil {
		km = &sync.Mutex{}
		p.keyMu[key] = km
	}
	p.mu.Unlock()
	// One request per key at a time: a concurrent resend waits, then replays.
	km.Lock()
	defer km.Unlock()
	p.mu.Lock()
	ans, ok := p.answers[key]
	p.mu.Unlock()
	if ok {
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(ans)
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, 400, map[string]any{"errors": []any{map[string]any{"code": "INVALID_REQUEST", "message": err.Error()}}})
		return
	}
	var man struct {
		Tiles []struct {
			TileID string `json:"tile_id"`
		} `json:"tiles"`
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeJSON(w, 400, map[string]any{"errors": []any{map[string]any{"code": "INVALID_REQUEST", "message": err.Error()}}})
			return
		}
		b, _ := io.ReadAll(part)
		if part.FormName() == "manifest" {
			_ = json.Unmarshal(b, &man)
		}
	}
	time.Sleep(p.latency) // the satellite link's round trip
	type result struct {
		TileID  string `json:"tile_id"`
		Status  string `json:"status"`
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message,omitempty"`
	}
	var res []result
	p.mu.Lock()
	for _, mt := range man.Tiles {
		p.carried[mt.TileID]++
		if p.reject(mt.TileID) {
			res = append(res, result{TileID: mt.TileID, Status: "rejected", Reason: "decode_error", Message: "not a PNG"})
			continue
		}
		p.stores[mt.TileID]++
		res = append(res, result{TileID: mt.TileID, Status: "accepted"})
	}
	ans, _ = json.Marshal(map[string]any{"op_id": key, "results": res})
	p.answers[key] = ans
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(ans)
}

// snapshot copies what the provider stored and carried.
func (p *keyProvider) snapshot() (stores, carried map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stores, carried = map[string]int{}, map[string]int{}
	for k, v := range p.stores {
		stores[k] = v
	}
	for k, v := range p.carried {
		carried[k] = v
	}
	return stores, carried
}
