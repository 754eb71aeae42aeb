package security

import (
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"sync/atomic"
)

// fakeProvider is a minimal honest provider: it advertises capabilities and
// accepts every tile of every batch. The hostile servers start from it.
type fakeProvider struct {
	batches atomic.Int64
	auth    atomic.Value // last Authorization header seen
}

func (p *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.auth.Store(r.Header.Get("Authorization"))
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/capabilities":
		writeJSON(w, 200, map[string]any{"api_version": "v1", "max_batch_tiles": 256,
			"max_batch_bytes": 32 << 20, "max_tile_bytes": 4 << 20,
			"idempotency": map[string]any{"retention_seconds": 86400}})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tiles:batch"):
		p.batches.Add(1)
		p.batch(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/operations/"):
		writeJSON(w, 200, map[string]any{"op_id": strings.TrimPrefix(r.URL.Path, "/v1/operations/"), "state": "absent"})
	default:
		writeJSON(w, 404, map[string]any{"errors": []any{map[string]string{"code": "NOT_FOUND", "message": "no route"}}})
	}
}

func (p *fakeProvider) batch(w http.ResponseWriter, r *http.Request) {
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		writeJSON(w, 400, map[string]any{"errors": []any{map[string]string{"code": "INVALID_REQUEST", "message": err.Error()}}})
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	part, err := mr.NextPart()
	if err != nil {
		writeJSON(w, 400, map[string]any{"errors": []any{map[string]string{"code": "INVALID_REQUEST", "message": err.Error()}}})
		return
	}
	var manifest struct {
		Tiles []struct {
			TileID string `json:"tile_id"`
		} `json:"tiles"`
	}
	if err := json.NewDecoder(part).Decode(&manifest); err != nil {
		writeJSON(w, 400, map[string]any{"errors": []any{map[string]string{"code": "INVALID_REQUEST", "message": err.Error()}}})
		return
	}
	for {
		part, err := mr.NextPart()
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, part)
	}
	results := make([]map[string]string, 0, len(manifest.Tiles))
	for _, t := range manifest.Tiles {
		results = append(results, map[string]string{"tile_id": t.TileID, "status": "accepted"})
	}
	writeJSON(w, 200, map[string]any{"op_id": strings.Trim(r.Header.Get("Idempotency-Key"), `"`), "results": results})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
