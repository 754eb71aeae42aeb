package uploader_test

import (
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// fakeProvider is another server that follows docs/provider-api.md, scripted
// per test: capabilities are fixed, answer decides each batch request, and
// a tile lookup finds nothing (404 TILE_NOT_FOUND).
type fakeProvider struct {
	t      testing.TB
	caps   map[string]any
	answer func(w http.ResponseWriter, r *http.Request, b fakeBatch)

	mu       sync.Mutex
	batches  []fakeBatch
	tileSeen map[string]int
}

// fakeBatch is one received batch request.
type fakeBatch struct {
	Key     string
	Attempt int // 1 for the first request with this key
	TileIDs []string
	Bytes   map[string][]byte
	At      time.Time // when the request arrived
}

func newFake(t testing.TB, answer func(http.ResponseWriter, *http.Request, fakeBatch)) (*fakeProvider, *httptest.Server) {
	f := &fakeProvider{t: t, answer: answer, tileSeen: map[string]int{},
		caps: map[string]any{"api_version": "v1", "max_batch_tiles": 4, "max_batch_bytes": 1 << 20, "max_tile_bytes": 1 << 16}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.caps)
	})
	mux.HandleFunc("POST /v1/flights/{flight}/tiles:batch", f.batch)
	// It keeps no tiles: a lookup finds none, in the contract's words.
	mux.HandleFunc("GET /v1/flights/{flight}/tiles/{tile}", func(w http.ResponseWriter, r *http.Request) {
		operation.WriteError(w, http.StatusNotFound, operation.CodeTileNotFound, "no such tile", nil, nil)
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return f, hs
}

func (f *fakeProvider) batch(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		f.t.Errorf("fake: content type: %v", err)
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	b := fakeBatch{Key: r.Header.Get("Idempotency-Key"), Bytes: map[string][]byte{}, At: at}
	p, err := mr.NextPart()
	if err != nil || p.FormName() != "manifest" {
		f.t.Errorf("fake: first part: %v %q", err, p.FormName())
		return
	}
	var m struct {
		Tiles []struct {
			TileID string `json:"tile_id"`
		} `json:"tiles"`
	}
	if err := json.NewDecoder(p).Decode(&m); err != nil {
		f.t.Errorf("fake: manifest: %v", err)
		return
	}
	for _, mt := range m.Tiles {
		b.TileIDs = append(b.TileIDs, mt.TileID)
		p, err := mr.NextPart()
		if err != nil {
			return // the client aborted
		}
		data, _ := io.ReadAll(p)
		b.Bytes[p.FormName()] = data
	}
	f.mu.Lock()
	for _, prev := range f.batches {
		if prev.Key == b.Key {
			b.Attempt++
		}
	}
	b.Attempt++
	if b.Attempt == 1 {
		for _, id := range b.TileIDs {
			f.tileSeen[id]++
		}
	}
	f.batches = append(f.batches, b)
	f.mu.Unlock()
	f.answer(w, r, b)
}

func (f *fakeProvider) received() []fakeBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeBatch(nil), f.batches...)
}

// answerAll writes a 200 naming every tile with status.
func answerAll(w http.ResponseWriter, b fakeBatch, status string) {
	type res struct {
		TileID string `json:"tile_id"`
		Status string `json:"status"`
	}
	out := struct {
		OpID    string `json:"op_id"`
		Results []res  `json:"results"`
	}{OpID: b.Key}
	for _, id := range b.TileIDs {
		out.Results = append(out.Results, res{id, status})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
