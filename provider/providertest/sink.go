package providertest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Sink is an in-memory provider for benchmarks: it follows docs/provider-api.md
// for everything an upload run uses (bearer token, capabilities, batches
// under idempotency keys with replay and conflict, operation state) and
// parses every batch body in full, checking each part's name, size and
// sha256 against the manifest, so a client cannot pass it less than the
// contract asks. It keeps only checksums, never bytes, and touches no disk
// and no database: a benchmark against it measures the client, not the
// provider's storage (the reference provider's Postgres and fsyncs would
// be the bottleneck and hide the client's cost).
type Sink struct {
	URL string

	mu    sync.Mutex
	ops   map[string]sinkOp // Idempotency-Key -> sealed answer
	tiles map[string]string // flight + "/" + tile_id -> sha256 held

	// Batches, Tiles and Replays count what the sink answered; BadParts
	// counts parts whose size or sha256 did not match their manifest entry.
	Batches, Tiles, Replays, BadParts atomic.Int64
	// FirstBatch is closed when the first batch request arrives (its
	// headers are in: the batch is on the wire).
	FirstBatch chan struct{}
	firstOnce  *sync.Once

	maxTiles atomic.Int64 // the max_batch_tiles advertised and enforced
}

type sinkOp struct {
	fingerprint string
	answer      []byte
}

// sinkLimits are the capabilities the sink advertises by default (the
// contract's example values); SetMaxBatchTiles changes the tile limit.
const (
	sinkMaxBatchTiles = 256
	sinkMaxBatchBytes = 32 << 20
	sinkMaxTileBytes  = 4 << 20
)

// StartSink serves a Sink on loopback until the test ends.
func StartSink(tb testing.TB) *Sink {
	tb.Helper()
	s := &Sink{ops: map[string]sinkOp{}, tiles: map[string]string{}, FirstBatch: make(chan struct{}), firstOnce: &sync.Once{}}
	s.maxTiles.Store(sinkMaxBatchTiles)
	hs := httptest.NewServer(s)
	tb.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// Reset forgets every key and tile, as a fresh provider would.
func (s *Sink) Reset() {
	s.mu.Lock()
	s.ops, s.tiles = map[string]sinkOp{}, map[string]string{}
	s.FirstBatch, s.firstOnce = make(chan struct{}), &sync.Once{}
	s.mu.Unlock()
	s.Batches.Store(0)
	s.Tiles.Store(0)
	s.Replays.Store(0)
	s.BadParts.Store(0)
}

// SetMaxBatchTiles makes the sink advertise and enforce max_batch_tiles n
// (n <= 0: the default, 256), as providers with smaller batch limits do.
func (s *Sink) SetMaxBatchTiles(n int) {
	if n <= 0 {
		n = sinkMaxBatchTiles
	}
	s.maxTiles.Store(int64(n))
}

// Held is how many tiles the sink holds.
func (s *Sink) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tiles)
}

func sinkError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"errors":[{"code":%q,"message":%q}]}`, code, msg)
}

func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+Token {
		sinkError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "missing or wrong token")
		return
	}
	p := r.URL.Path
	switch {
	case r.Method == http.MethodGet && p == "/v1/capabilities":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"api_version":"v1","max_batch_tiles":%d,"max_batch_bytes":%d,"max_tile_bytes":%d,"idempotency":{"retention_seconds":86400}}`,
			s.maxTiles.Load(), sinkMaxBatchBytes, sinkMaxTileBytes)
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/operations/"):
		s.operation(w, strings.TrimPrefix(p, "/v1/operations/"))
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/v1/flights/") && strings.HasSuffix(p, "/tiles:batch"):
		s.mu.Lock()
		s.firstOnce.Do(func() { close(s.FirstBatch) })
		s.mu.Unlock()
		s.batch(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/v1/flights/"), "/tiles:batch"))
	default:
		sinkError(w, http.StatusNotFound, "NOT_FOUND", "no such endpoint")
	}
}

func (s *Sink) operation(w http.ResponseWriter, key string) {
	s.mu.Lock()
	op, ok := s.ops[key]
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		fmt.Fprintf(w, `{"op_id":%q,"state":"absent"}`, key)
		return
	}
	fmt.Fprintf(w, `{"op_id":%q,"state":"sealed","outcome":{"status":200,"body":%s}}`, key, op.answer)
}

type sinkEntry struct {
	TileID string `json:"tile_id"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type sinkResult struct {
	TileID  string `json:"tile_id"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

var sinkBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (s *Sink) batch(w http.ResponseWriter, r *http.Request, flight string) {
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	if len(key) < 16 || len(key) > 128 {
		sinkError(w, http.StatusBadRequest, "IDEMPOTENCY_KEY_MISSING", "Idempotency-Key of 16 to 128 characters required")
		return
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		sinkError(w, http.StatusBadRequest, "INVALID_REQUEST", "multipart/form-data body required")
		return
	}
	body := http.MaxBytesReader(w, r.Body, sinkMaxBatchBytes)
	mr := multipart.NewReader(body, params["boundary"])
	part, err := mr.NextPart()
	if err != nil || part.FormName() != "manifest" {
		sinkError(w, http.StatusBadRequest, "INVALID_REQUEST", "the first part must be the manifest")
		return
	}
	var m struct {
		Tiles []sinkEntry `json:"tiles"`
	}
	if err := json.NewDecoder(part).Decode(&m); err != nil || len(m.Tiles) == 0 || int64(len(m.Tiles)) > s.maxTiles.Load() {
		sinkError(w, http.StatusBadRequest, "INVALID_REQUEST", "manifest unreadable, empty or too long")
		return
	}
	fp := sha256.New()
	fp.Write([]byte(flight))
	for _, e := range m.Tiles {
		fp.Write([]byte{0})
		fp.Write([]byte(e.TileID))
		fp.Write([]byte{0})
		fp.Write([]byte(e.SHA256))
	}
	fingerprint := hex.EncodeToString(fp.Sum(nil))
	if replayed := s.replay(w, key, fingerprint); replayed {
		return
	}
	// Every part is read and checked: its name, then size and sha256.
	bufp := sinkBufs.Get().(*[]byte)
	defer sinkBufs.Put(bufp)
	h := sha256.New()
	good := make([]bool, len(m.Tiles))
	for i, e := range m.Tiles {
		part, err := mr.NextPart()
		if err != nil {
			sinkError(w, http.StatusBadRequest, "INVALID_REQUEST", fmt.Sprintf("part %d: %v", i+1, err))
			return
		}
		if part.FormName() != e.TileID {
			sinkError(w, http.StatusBadRequest, "INVALID_REQUEST", fmt.Sprintf("part %d is %q, manifest says %q", i+1, part.FormName(), e.TileID))
			return
		}
		n, err := copyHash(h, part, *bufp, sinkMaxTileBytes+1)
		if err != nil {
			sinkError(w, http.StatusBadRequest, "INVALID_REQUEST", fmt.Sprintf("part %s: %v", e.TileID, err))
			return
		}
		good[i] = n == e.Size && strings.EqualFold(hex.EncodeToString(h.Sum(nil)), e.SHA256)
	}
	if _, err := mr.NextPart(); err != io.EOF {
		sinkError(w, http.StatusBadRequest, "INVALID_REQUEST", "parts after the last manifest tile, or an unterminated body")
		return
	}
	results := make([]sinkResult, len(m.Tiles))
	s.mu.Lock()
	if _, ok := s.ops[key]; ok { // the same key ran meanwhile
		s.mu.Unlock()
		s.replay(w, key, fingerprint)
		return
	}
	for i, e := range m.Tiles {
		results[i] = sinkResult{TileID: e.TileID, Status: "accepted"}
		switch held, ok := s.tiles[flight+"/"+e.TileID]; {
		case !good[i]:
			results[i] = sinkResult{TileID: e.TileID, Status: "rejected", Reason: "checksum_mismatch", Message: "size or sha256 does not match the bytes"}
			s.BadParts.Add(1)
		case ok && strings.EqualFold(held, e.SHA256):
			results[i].Status = "duplicate"
		default:
			s.tiles[flight+"/"+e.TileID] = strings.ToLower(e.SHA256)
		}
	}
	answer, _ := json.Marshal(struct {
		OpID    string       `json:"op_id"`
		Results []sinkResult `json:"results"`
	}{key, results})
	s.ops[key] = sinkOp{fingerprint: fingerprint, answer: answer}
	s.mu.Unlock()
	s.Batches.Add(1)
	s.Tiles.Add(int64(len(m.Tiles)))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(answer)
}

// replay answers a key already sealed: its answer byte for byte with the
// same fingerprint, 422 IDEMPOTENCY_CONFLICT with another.
func (s *Sink) replay(w http.ResponseWriter, key, fingerprint string) bool {
	s.mu.Lock()
	op, ok := s.ops[key]
	s.mu.Unlock()
	if !ok {
		return false
	}
	if op.fingerprint != fingerprint {
		sinkError(w, http.StatusUnprocessableEntity, "IDEMPOTENCY_CONFLICT", "this key was used with another body")
		return true
	}
	s.Replays.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	_, _ = w.Write(op.answer)
	return true
}

// copyHash hashes r into h (reset first) through buf, reading at most
// limit bytes, and returns how many it read.
func copyHash(h hash.Hash, r io.Reader, buf []byte, limit int64) (int64, error) {
	h.Reset()
	n, err := io.CopyBuffer(h, io.LimitReader(r, limit), buf)
	return n, err
}
