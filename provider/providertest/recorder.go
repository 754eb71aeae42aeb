package providertest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Recorder is a provider for tests that count what a client sends: it
// follows provider-api.md's batch contract over real loopback HTTP (bearer
// token, capabilities, batches under idempotency keys, one request per key
// at a time, a seen key replaying its sealed answer, operation state) but
// stores a tile again whenever a new key carries it and never answers
// duplicate, so a tile sent under two keys shows as stored twice.
type Recorder struct {
	URL  string
	HTTP *httptest.Server

	token   string
	latency time.Duration
	reject  func(tileID string) bool

	mu      sync.Mutex
	busy    map[string]int    // tile_id -> storage_busy answers still to give
	stores  map[string]int    // tile_id -> times stored
	carried map[string]int    // tile_id -> new keys that carried it
	answers map[string][]byte // Idempotency-Key -> sealed answer
	keyMu   map[string]*sync.Mutex
	posts   int
	auth    []string
}

// RecorderConfig says how a Recorder answers. The zero value accepts
// every tile at once.
type RecorderConfig struct {
	// Token is the bearer token it accepts (default Token).
	Token string
	// Latency is how long every new batch takes, as a satellite link's
	// round trip (default none).
	Latency time.Duration
	// Reject names tiles it always rejects as decode_error, a poison tile
	// (default none).
	Reject func(tileID string) bool
}

// StartRecorder serves a Recorder on loopback until the test ends.
func StartRecorder(tb testing.TB, cfg RecorderConfig) *Recorder {
	tb.Helper()
	if cfg.Token == "" {
		cfg.Token = Token
	}
	if cfg.Reject == nil {
		cfg.Reject = func(string) bool { return false }
	}
	p := &Recorder{token: cfg.Token, latency: cfg.Latency, reject: cfg.Reject, busy: map[string]int{},
		stores: map[string]int{}, carried: map[string]int{}, answers: map[string][]byte{}, keyMu: map[string]*sync.Mutex{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) {
		recorderJSON(w, 200, map[string]any{"api_version": "v1", "max_batch_tiles": 256, "max_batch_bytes": 32 << 20,
			"max_tile_bytes": 4 << 20, "idempotency": map[string]any{"retention_seconds": 86400}})
	})
	mux.HandleFunc("POST /v1/flights/{flight}/tiles:batch", p.batch)
	mux.HandleFunc("GET /v1/operations/{op}", p.operation)
	p.HTTP = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.auth = append(p.auth, r.Header.Get("Authorization"))
		p.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+p.token {
			recorderError(w, 401, "UNAUTHENTICATED", "bad token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	tb.Cleanup(p.HTTP.Close)
	p.URL = p.HTTP.URL
	return p
}

// Busy makes the recorder reject tileID as storage_busy the next times
// new keys carry it, then accept it.
func (p *Recorder) Busy(tileID string, times int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy[tileID] = times
}

// Posts is how many batch requests arrived, replays included.
func (p *Recorder) Posts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.posts
}

// Auth is every request's Authorization header, in order.
func (p *Recorder) Auth() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.auth...)
}

// Stores is, per tile ID, how many times it was stored.
func (p *Recorder) Stores() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.stores)
}

// Carried is, per tile ID, how many new keys carried it (a replay of a
// key carries nothing new).
func (p *Recorder) Carried() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.carried)
}

func recorderJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func recorderError(w http.ResponseWriter, status int, code, msg string) {
	recorderJSON(w, status, map[string]any{"errors": []any{map[string]any{"code": code, "message": msg}}})
}

func (p *Recorder) operation(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	ans, ok := p.answers[r.PathValue("op")]
	p.mu.Unlock()
	if !ok {
		recorderJSON(w, 200, map[string]any{"op_id": r.PathValue("op"), "state": "absent"})
		return
	}
	recorderJSON(w, 200, map[string]any{"op_id": r.PathValue("op"), "state": "sealed",
		"outcome": map[string]any{"status": 200, "body": json.RawMessage(ans)}})
}

type recorderResult struct {
	TileID  string `json:"tile_id"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

func (p *Recorder) batch(w http.ResponseWriter, r *http.Request) {
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
		recorderError(w, 400, "INVALID_REQUEST", err.Error())
		return
	}
	var man struct {
		Tiles []struct {
			TileID string `json:"tile_id"`
			SHA256 string `json:"sha256"`
		} `json:"tiles"`
	}
	sums := map[string]string{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			recorderError(w, 400, "INVALID_REQUEST", err.Error())
			return
		}
		b, _ := io.ReadAll(part)
		if part.FormName() != "manifest" {
			h := sha256.Sum256(b)
			sums[part.FormName()] = hex.EncodeToString(h[:])
			continue
		}
		if err := json.Unmarshal(b, &man); err != nil {
			recorderError(w, 400, "INVALID_REQUEST", err.Error())
			return
		}
		p.mu.Lock()
		for _, mt := range man.Tiles {
			p.carried[mt.TileID]++
		}
		p.mu.Unlock()
	}
	time.Sleep(p.latency) // the satellite link's round trip
	p.mu.Lock()
	defer p.mu.Unlock()
	var res []recorderResult
	for _, mt := range man.Tiles {
		switch {
		case p.reject(mt.TileID):
			res = append(res, recorderResult{TileID: mt.TileID, Status: "rejected", Reason: "decode_error", Message: "not a PNG"})
		case p.busy[mt.TileID] > 0:
			p.busy[mt.TileID]--
			res = append(res, recorderResult{TileID: mt.TileID, Status: "rejected", Reason: "storage_busy", Message: "try again"})
		case sums[mt.TileID] != mt.SHA256:
			res = append(res, recorderResult{TileID: mt.TileID, Status: "rejected", Reason: "checksum_mismatch"})
		default:
			p.stores[mt.TileID]++
			res = append(res, recorderResult{TileID: mt.TileID, Status: "accepted"})
		}
	}
	ans, _ = json.Marshal(map[string]any{"op_id": key, "results": res})
	p.answers[key] = ans
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(ans)
}
