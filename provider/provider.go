// Package provider is the reference satellite provider: a server that
// follows docs/provider-api.md in full, so the client can be tested against the
// contract over real HTTP.
//
// It promises: a tile is stored at most once per (flight, tile_id) with the
// bytes its manifest checksums; batches run under optable.IdempotencyMiddleware
// (persist, idem), so a resent key replays its sealed answer byte for byte;
// every injected fault is drawn from a seeded RNG and counted, so a chaos
// run is repeatable and auditable through /debug/ledger and /metrics.
package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/optable"
)

// Limits are what GET /v1/capabilities advertises and what the server
// enforces. Zero fields take the defaults of docs/provider-api.md's example.
type Limits struct {
	MaxBatchTiles int   // default 256
	MaxBatchBytes int64 // default 32 MiB (the whole request body)
	MaxTileBytes  int64 // default 4 MiB
}

func (l Limits) withDefaults() Limits {
	if l.MaxBatchTiles <= 0 {
		l.MaxBatchTiles = 256
	}
	if l.MaxBatchBytes <= 0 {
		l.MaxBatchBytes = 32 << 20
	}
	if l.MaxTileBytes <= 0 {
		l.MaxTileBytes = 4 << 20
	}
	return l
}

// Config configures New. Pool and StorageDir are required; the database
// must have had EnsureSchema applied.
type Config struct {
	Pool       *pgxpool.Pool
	StorageDir string // tiles are written under it, one file per tile
	// Token is the bearer token of the one caller "client"; Tokens maps
	// more tokens to caller names. At least one is required.
	Token  string
	Tokens map[string]string
	// AllowedFlights, when not empty, is the only flights any caller may
	// upload to; others answer 403 FORBIDDEN.
	AllowedFlights []string
	Limits         Limits
	// Retention is how long a key is replayed. Default 24h.
	Retention time.Duration
	// GCEvery is how often operation records that expired more than
	// Retention ago are deleted (optable.Table.GC), so the table does not
	// grow without bound; a key older than Retention is still answered
	// 422 IDEMPOTENCY_EXPIRED after its record is gone, by its UUIDv7
	// time. Default 1m; negative: never (tests that collect by hand).
	GCEvery time.Duration
	// StrictSequencing enables Client-Id / Client-Sequence checking.
	StrictSequencing bool
	// SequenceCacheSize and SequenceCacheTTL bound the outcomes strict
	// sequencing replays for a committed number from memory; after them a
	// resend is answered from the operation table for its key, or 409
	// ALREADY_COMMITTED when the table does not know the key. Zero:
	// optable's defaults (10,000 outcomes, 5 minutes).
	SequenceCacheSize int
	SequenceCacheTTL  time.Duration
	Faults            FaultConfig
	Logger            zerolog.Logger
	Now               func() time.Time // default time.Now
	// AfterSeal, if set, runs after a batch's answer is sealed and before
	// it is written: tests use it to hold an answer back.
	AfterSeal func(opID string)
	// BeforeRun, if set, runs when a batch starts to execute (its key is
	// live): tests use it to hold a batch in progress.
	BeforeRun func(opID string)
	// WaitLive is how long a resend of a batch in progress waits for its
	// answer before 409 IDEMPOTENCY_PROCESSING; 0 = optable's default,
	// negative = answer 409 at once.
	WaitLive time.Duration
	// SkipFsync skips fsync of tile files and commits tile records without
	// waiting for the disk: for benchmarks only, where the provider must
	// not be the bottleneck; default off.
	SkipFsync bool
}

// Server is the provider. Handler serves it; it is safe for concurrent use.
type Server struct {
	cfg     Config
	limits  Limits
	pool    *pgxpool.Pool
	tiles   *tileStore
	table   *optable.Table
	seq     *optable.Sequencer
	faults  *injector
	metrics *metrics
	log     zerolog.Logger
	now     func() time.Time
	callers map[string]string // token -> caller
	allowed map[string]bool
	stopGC  func() // stops the collector and waits for it
}

// New builds a server. It runs the operation table's crash recovery once,
// so operations left live by a previous process become indeterminate.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil {
		return nil, errors.New("new provider: Pool is required")
	}
	if cfg.StorageDir == "" {
		return nil, errors.New("new provider: StorageDir is required")
	}
	if err := os.MkdirAll(cfg.StorageDir, 0o700); err != nil {
		return nil, fmt.Errorf("new provider: storage dir: %w", err)
	}
	callers := map[string]string{}
	for tok, who := range cfg.Tokens {
		callers[tok] = who
	}
	if cfg.Token != "" {
		callers[cfg.Token] = "client"
	}
	if len(callers) == 0 {
		return nil, errors.New("new provider: a token is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{
		cfg: cfg, limits: cfg.Limits.withDefaults(), pool: cfg.Pool, log: cfg.Logger, now: cfg.Now,
		callers: callers, metrics: newMetrics(),
	}
	s.tiles = &tileStore{pool: cfg.Pool, dir: cfg.StorageDir, noFsync: cfg.SkipFsync}
	// IssuedAt: an ID whose record was collected is still known to be
	// older than retention_seconds, and is refused rather than run as new
	// (docs/provider-api.md). The price: a client whose clock is behind by more
	// than Retention has its new keys refused as expired.
	s.table = optable.NewTable(optable.NewPGStore(cfg.Pool), optable.TableOptions{
		Retention: cfg.Retention, Now: cfg.Now, IssuedAt: optable.UUIDv7IssuedAt})
	if cfg.StrictSequencing {
		s.seq = optable.NewSequencer(optable.NewPGSequenceStore(cfg.Pool), optable.SequencerOptions{
			CacheSize: cfg.SequenceCacheSize, CacheTTL: cfg.SequenceCacheTTL, Now: cfg.Now})
	}
	if len(cfg.AllowedFlights) > 0 {
		s.allowed = map[string]bool{}
		for _, f := range cfg.AllowedFlights {
			s.allowed[f] = true
		}
	}
	inj, err := newInjector(cfg.Faults, s.metrics)
	if err != nil {
		return nil, err
	}
	s.faults = inj
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.table.Recover(ctx); err != nil {
		return nil, fmt.Errorf("new provider: %w", err)
	}
	s.stopGC = s.collect(cfg.GCEvery)
	return s, nil
}

// DefaultGCEvery is Config.GCEvery's default.
const DefaultGCEvery = time.Minute

// collect runs the operation table's GC every interval until the returned
// stop is called; each run is counted, and a failed one logged and retried
// at the next tick.
func (s *Server) collect(every time.Duration) (stop func()) {
	if every < 0 {
		return func() {}
	}
	if every == 0 {
		every = DefaultGCEvery
	}
	ctx, cancel := context.WithCancel(context.Background())
	ticker := time.NewTicker(every)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer ticker.Stop()
		s.table.CollectEvery(ctx, ticker.C, func(n int, err error) {
			if err != nil {
				if ctx.Err() == nil {
					s.metrics.gcErrors.Inc()
					s.log.Warn().Err(err).Msg("operation GC failed; retrying at the next tick")
				}
				return
			}
			s.metrics.collected.Add(float64(n))
		})
	}()
	return func() { cancel(); <-done }
}

// RestartFaults starts the fault draws (FaultConfig) again from their
// seed, so the requests after it meet the same faults, in the same order,
// as the first requests the server saw: a benchmark's uploads are then
// compared under the same faults.
func (s *Server) RestartFaults() { s.faults.restart() }

// Close stops the operation GC. The handler keeps working; call it once,
// when the server is done.
func (s *Server) Close() { s.stopGC() }

// Handler returns the server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	auth := s.authenticate
	mux.Handle("GET /v1/capabilities", s.route("capabilities", auth(http.HandlerFunc(s.capabilities))))
	mux.Handle("POST /v1/flights/{flight_id}/tiles:batch", s.route("tiles.batch", auth(s.batchChain())))
	mux.Handle("GET /v1/operations/{op_id}", s.route("operations.get", auth(optable.OperationStateHandler(s.table, callerOf))))
	mux.Handle("GET /v1/flights/{flight_id}/tiles/{tile_id}", s.route("tiles.get", auth(http.HandlerFunc(s.getTile))))
	if s.seq != nil {
		mux.Handle("GET /v1/clients/{client_id}/state", s.route("clients.state", auth(optable.ClientStateHandler(s.seq, callerOf))))
	}
	mux.Handle("GET /debug/ledger", s.route("debug.ledger", auth(http.HandlerFunc(s.ledger))))
	// Behind the token like /debug/ledger: the counters name routes,
	// faults and volumes that are nobody else's business.
	mux.Handle("GET /metrics", auth(s.metrics.handler()))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		operation.WriteError(w, http.StatusNotFound, "NOT_FOUND", "no such route", nil, nil)
	})
	return mux
}

// batchChain is the upload route, outermost first: fault injection (which
// may answer before anything runs, or mangle the sealed answer after),
// the size limit, optional strict sequencing, the idempotency table, then
// the batch handler.
func (s *Server) batchChain() http.Handler {
	var h http.Handler = http.HandlerFunc(s.batch)
	h = optable.IdempotencyMiddleware(s.table, optable.MiddlewareOptions{
		Method:      "tiles.batch",
		Policy:      optable.Policy{Persist: true, Idem: true},
		Scope:       callerOf,
		Fingerprint: s.fingerprint,
		WaitLive:    s.cfg.WaitLive,
		Log:         s.log,
	})(h)
	if s.seq != nil {
		h = optable.SequenceMiddleware(s.seq, callerOf, s.table)(h)
	}
	h = s.limitBody(h)
	if s.cfg.AfterSeal != nil {
		h = s.holdAnswer(h)
	}
	return s.faults.wrap(h)
}

// holdAnswer calls Config.AfterSeal when the answer is about to be written,
// which for a batch that ran is after its outcome was sealed.
func (s *Server) holdAnswer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := operation.ParseIdempotencyKey(r.Header.Get(operation.HeaderIdempotencyKey))
		next.ServeHTTP(&hookWriter{ResponseWriter: w, hook: func() { s.cfg.AfterSeal(key) }}, r)
	})
}

type hookWriter struct {
	http.ResponseWriter
	hook func()
	done bool
}

func (h *hookWriter) WriteHeader(s int) {
	if !h.done {
		h.done = true
		h.hook()
	}
	h.ResponseWriter.WriteHeader(s)
}

func (h *hookWriter) Write(b []byte) (int, error) {
	if !h.done {
		h.WriteHeader(http.StatusOK)
	}
	return h.ResponseWriter.Write(b)
}

func (h *hookWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (s *Server) capabilities(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"api_version":     "v1",
		"max_batch_tiles": s.limits.MaxBatchTiles,
		"max_batch_bytes": s.limits.MaxBatchBytes,
		"max_tile_bytes":  s.limits.MaxTileBytes,
		"idempotency":     map[string]any{"retention_seconds": int64(s.table.Retention() / time.Second)},
	})
}

// limitBody answers 413 before anything is read when the declared body is
// over max_batch_bytes, and cuts an undeclared one off at the limit.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.limits.MaxBatchBytes {
			operation.WriteError(w, http.StatusRequestEntityTooLarge, operation.CodeBatchTooLarge,
				fmt.Sprintf("body of %d bytes is over max_batch_bytes %d", r.ContentLength, s.limits.MaxBatchBytes), nil, nil)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.limits.MaxBatchBytes)
		next.ServeHTTP(w, r)
	})
}
