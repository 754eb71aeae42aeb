package upload

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeProvider is a minimal server following provider-api.md: bearer auth,
// capabilities, batches with per-key replay, and operation state. reject
// names tiles it always rejects (a poison tile).
type fakeProvider struct {
	t      *testing.T
	token  string
	reject map[string]bool
	// flaky rejects a tile this many more times (storage_busy), then
	// accepts it.
	flaky map[string]int

	mu      sync.Mutex
	stored  map[string]string // tile_id -> sha256
	answers map[string][]byte // Idempotency-Key -> sealed answer
	posts   int
	auth    []string
	sent    map[string]int // tile_id -> batch requests that carried it
}

type batchResult struct {
	TileID  string `json:"tile_id"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

func newFakeProvider(t *testing.T, token string, reject ...string) (*fakeProvider, *httptest.Server) {
	p := &fakeProvider{t: t, token: token, reject: map[string]bool{}, flaky: map[string]int{}, stored: map[string]string{}, answers: map[string][]byte{}}
	for _, id := range reject {
		p.reject[id] = true
	}
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
		p.mu.Lock()
		p.auth = append(p.auth, r.Header.Get("Authorization"))
		p.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+token {
			writeJSON(w, 401, map[string]any{"errors": []any{map[string]any{"code": "UNAUTHENTICATED", "message": "bad token"}}})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return p, srv
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (p *fakeProvider) batch(w http.ResponseWriter, r *http.Request) {
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	p.mu.Lock()
	p.posts++
	if ans, ok := p.answers[key]; ok {
		p.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(ans)
		return
	}
	p.mu.Unlock()
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, 400, map[string]any{"errors": []any{map[string]any{"code": "INVALID_REQUEST", "message": err.Error()}}})
		return
	}
	var man struct {
		Tiles []struct {
			TileID string `json:"tile_id"`
			SHA256 string `json:"sha256"`
		} `json:"tiles"`
	}
	sums := map[string]string{}
	defer func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.sent == nil {
			p.sent = map[string]int{}
		}
		for _, mt := range man.Tiles {
			p.sent[mt.TileID]++
		}
	}()
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
			if err := json.Unmarshal(b, &man); err != nil {
				writeJSON(w, 400, map[string]any{"errors": []any{map[string]any{"code": "INVALID_REQUEST", "message": err.Error()}}})
				return
			}
			continue
		}
		h := sha256.Sum256(b)
		sums[part.FormName()] = hex.EncodeToString(h[:])
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var res []batchResult
	for _, mt := range man.Tiles {
		switch {
		case p.reject[mt.TileID]:
			res = append(res, batchResult{TileID: mt.TileID, Status: "rejected", Reason: "decode_error", Message: "not a PNG"})
		case p.flaky[mt.TileID] > 0:
			p.flaky[mt.TileID]--
			res = append(res, batchResult{TileID: mt.TileID, Status: "rejected", Reason: "storage_busy", Message: "try again"})
		case sums[mt.TileID] != mt.SHA256:
			res = append(res, batchResult{TileID: mt.TileID, Status: "rejected", Reason: "checksum_mismatch"})
		case p.stored[mt.TileID] == mt.SHA256:
			res = append(res, batchResult{TileID: mt.TileID, Status: "duplicate"})
		default:
			p.stored[mt.TileID] = mt.SHA256
			res = append(res, batchResult{TileID: mt.TileID, Status: "accepted"})
		}
	}
	ans, _ := json.Marshal(map[string]any{"op_id": key, "results": res})
	p.answers[key] = ans
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(ans)
}

func (p *fakeProvider) postCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.posts
}

func (p *fakeProvider) timesSent(tileID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[tileID]
}
