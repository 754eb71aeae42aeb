package providertest

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// Recorder is a provider for tests that count what a client sends: it
// follows docs/provider-api.md's batch contract over real loopback HTTP (bearer
// token, capabilities, batches under idempotency keys, one request per key
// at a time, a seen key replaying its sealed answer, operation state) but
// stores a tile again whenever a new key carries it and never answers
// duplicate, so a tile sent under two keys shows as stored twice. It
// answers a tile lookup (GET /v1/flights/{f}/tiles/{t}) from what it
// stored, and LoseAnswers makes it lose answers as a broken link would.
type Recorder struct {
	URL  string
	HTTP *httptest.Server

	token   string
	latency time.Duration
	reject  func(tileID string) bool
	caps    map[string]any

	mu      sync.Mutex
	busy    map[string]int    // tile_id -> storage_busy answers still to give
	stores  map[string]int    // tile_id -> times stored
	carried map[string]int    // tile_id -> new keys that carried it
	answers map[string][]byte // Idempotency-Key -> sealed answer
	keyMu   map[string]*sync.Mutex
	posts   int
	auth    []string
	held    map[string]heldTile // tile_id -> what it stored last
	lookups int
	lose    func(key string, ids []string) string
	expired map[string]bool // keys answered 422 IDEMPOTENCY_EXPIRED
	cut     map[string]bool // keys whose every answer is cut off
	// noLookups, noOperations: the route answers a bare 404, as a gateway
	// or a server that does not route it.
	noLookups, noOperations bool
}

type heldTile struct {
	sha256 string
	size   int
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
	// MaxBatchTiles is the max_batch_tiles it advertises (default 256).
	MaxBatchTiles int
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
	if cfg.MaxBatchTiles == 0 {
		cfg.MaxBatchTiles = 256
	}
	p := &Recorder{token: cfg.Token, latency: cfg.Latency, reject: cfg.Reject, busy: map[string]int{},
		stores: map[string]int{}, carried: map[string]int{}, answers: map[string][]byte{}, keyMu: map[string]*sync.Mutex{},
		held: map[string]heldTile{}, expired: map[string]bool{}, cut: map[string]bool{},
		caps: map[string]any{"api_version": "v1", "max_batch_tiles": cfg.MaxBatchTiles, "max_batch_bytes": 32 << 20,
			"max_tile_bytes": 4 << 20, "idempotency": map[string]any{"retention_seconds": 86400}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) { recorderJSON(w, 200, p.caps) })
	mux.HandleFunc("POST /v1/flights/{flight}/tiles:batch", p.batch)
	mux.HandleFunc("GET /v1/flights/{flight}/tiles/{tile}", p.lookup)
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

// LoseAnswers has lose called with each new key and its tile IDs; it
// returns how that answer is lost: "drop" (store and seal, then cut the
// connection, and from then on answer the key 422 IDEMPOTENCY_EXPIRED, as
// if it were past retention by the next send), "omit:<tile_id>" (leave that
// tile out of the results, though stored), "twice:<tile_id>" (name that
// tile twice), "status:<tile_id>" (give that tile a status the contract
// does not have), "otherop" (the answer names another operation), "cut"
// (store and seal, then cut every answer to the key off after its first
// bytes, replays included), or "" (answer in full). The sealed answer, which
// GET /v1/operations/{op_id} returns, is the one the client was sent.
func (p *Recorder) LoseAnswers(lose func(key string, ids []string) string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = lose
}

// Hold makes the recorder hold tileID as if a batch had stored it (a
// store counted; a lookup finds it).
func (p *Recorder) Hold(tileID, sha256 string, size int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stores[tileID]++
	p.held[tileID] = heldTile{sha256: sha256, size: size}
}

// Unrouted makes GET /v1/flights/{f}/tiles/{t} (lookups) and GET
// /v1/operations/{op_id} (operations) answer a bare 404 with no error body,
// as a gateway or a server that does not route them would.
func (p *Recorder) Unrouted(lookups, operations bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noLookups, p.noOperations = lookups, operations
}

// Lookups is how many tile lookups arrived.
func (p *Recorder) Lookups() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lookups
}

// StoredTwice lists, sorted, the tiles stored more than once.
func (p *Recorder) StoredTwice() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id, n := range p.stores {
		if n > 1 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
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
