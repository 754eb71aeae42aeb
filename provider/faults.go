package provider

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// FaultKind is one way the provider misbehaves on purpose.
type FaultKind string

const (
	// FaultDropAfterStore runs and seals the batch, then closes the
	// connection without an answer.
	FaultDropAfterStore FaultKind = "drop_after_store"
	// FaultStatus429 answers 429 with Retry-After and the retry extension;
	// nothing runs.
	FaultStatus429 FaultKind = "status_429"
	// FaultStatus503 answers 503 with Retry-After; nothing runs.
	FaultStatus503 FaultKind = "status_503"
	// FaultHTML502 answers 502 with an HTML page; nothing runs.
	FaultHTML502 FaultKind = "html_502"
	// FaultCutBody runs and seals the batch, then sends the answer's
	// headers with a longer Content-Length and half its body, and closes.
	FaultCutBody FaultKind = "cut_body"
	// FaultOmitResults drops one tile's result from the (sealed) answer.
	FaultOmitResults FaultKind = "omit_results"
	// FaultProcessing409 answers 409 IDEMPOTENCY_PROCESSING; nothing runs.
	FaultProcessing409 FaultKind = "processing_409"
)

// AllFaultKinds lists every kind, the default of FaultConfig.Kinds.
var AllFaultKinds = []FaultKind{FaultDropAfterStore, FaultStatus429, FaultStatus503, FaultHTML502,
	FaultCutBody, FaultOmitResults, FaultProcessing409}

// ParseFaultKinds parses a comma-separated list ("" or "all": every kind).
func ParseFaultKinds(s string) ([]FaultKind, error) {
	if s == "" || s == "all" {
		return AllFaultKinds, nil
	}
	var out []FaultKind
	for _, f := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(f))
		known := false
		for _, a := range AllFaultKinds {
			known = known || a == k
		}
		if !known {
			return nil, fmt.Errorf("unknown fault kind %q", k)
		}
		out = append(out, k)
	}
	return out, nil
}

// FaultConfig says how often and how the provider misbehaves. The zero
// value injects nothing. Which request gets which fault is drawn from one
// RNG seeded with Seed, as the requests come, so the n-th batch request
// meets the same fault in any run with that seed; what a request draws
// while it runs (which result an omit_results answer leaves out, a tile's
// storage_busy) comes from a second RNG seeded from Seed, so that how many
// requests run at once, or what they run, does not move the faults.
type FaultConfig struct {
	Rate  float64     // share of batch requests that get a fault, 0..1
	Seed  int64       // RNG seed
	Kinds []FaultKind // default AllFaultKinds
	// RejectTileIDs are always rejected with decode_error.
	RejectTileIDs []string
	// TransientRejectRate is the share of tiles rejected storage_busy,
	// among those not held already: a held tile is answered duplicate.
	TransientRejectRate float64
	// Latency is added before every batch request is handled.
	Latency time.Duration
	// LoseStoreAnswerTileIDs have the answer to their store's commit lost
	// (the database restarted after the commit, before its answer came):
	// the store fails although the tile's record committed.
	LoseStoreAnswerTileIDs []string
}

type injector struct {
	cfg    FaultConfig
	reject map[string]bool
	m      *metrics

	mu sync.Mutex
	// rng draws which request gets a fault (draw); handlerRng what a
	// request draws while it runs (busy, intn), apart so that those
	// draws, made as requests run concurrently, do not shift rng's.
	rng        *rand.Rand
	handlerRng *rand.Rand
	counts     map[FaultKind]int
	drawn      int
	events     []FaultEvent
}

// FaultEvent attributes one injected fault to the operation it hit.
type FaultEvent struct {
	OpID string    `json:"op_id"`
	Kind FaultKind `json:"kind"`
}

// maxFaultEvents bounds the ledger's event list on long chaos runs.
const maxFaultEvents = 100000

func newInjector(cfg FaultConfig, m *metrics) (*injector, error) {
	if cfg.Rate < 0 || cfg.Rate > 1 || cfg.TransientRejectRate < 0 || cfg.TransientRejectRate > 1 {
		return nil, fmt.Errorf("fault rates must be within 0..1")
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = AllFaultKinds
	}
	in := &injector{cfg: cfg, reject: map[string]bool{}, m: m, counts: map[FaultKind]int{}}
	in.seed()
	for _, id := range cfg.RejectTileIDs {
		in.reject[id] = true
	}
	return in, nil
}

func (in *injector) draw(opID string) FaultKind {
	if in.cfg.Rate <= 0 {
		return ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.rng.Float64() >= in.cfg.Rate {
		return ""
	}
	// Kinds take turns, so any run with as many faults as kinds sees every
	// kind; the RNG decides which requests get one.
	k := in.cfg.Kinds[in.drawn%len(in.cfg.Kinds)]
	in.drawn++
	in.counts[k]++
	if len(in.events) < maxFaultEvents {
		in.events = append(in.events, FaultEvent{OpID: opID, Kind: k})
	}
	in.m.faults.WithLabelValues(string(k)).Inc()
	return k
}

// restart draws again from the seed, the kinds' turn included: the
// requests after it meet the faults the first requests met. The ledger's
// counts and events stay totals.
func (in *injector) restart() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.seed()
	in.drawn = 0
}

// seed starts both RNGs from the seed.
func (in *injector) seed() {
	in.rng = rand.New(rand.NewSource(in.cfg.Seed))
	in.handlerRng = rand.New(rand.NewSource(in.cfg.Seed ^ 0x5eed))
}

func (in *injector) busy() bool {
	if in.cfg.TransientRejectRate <= 0 {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.handlerRng.Float64() < in.cfg.TransientRejectRate
}

func (in *injector) intn(n int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.handlerRng.Intn(n)
}

func (in *injector) rejects(tileID string) bool { return in.reject[tileID] }

// losesStoreAnswer reports whether tileID's store is to fail after its
// commit (FaultConfig.LoseStoreAnswerTileIDs).
func (in *injector) losesStoreAnswer(tileID string) bool {
	return slices.Contains(in.cfg.LoseStoreAnswerTileIDs, tileID)
}

// snapshot returns how many faults of each kind were injected, and which.
func (in *injector) snapshot() (map[FaultKind]int, []FaultEvent) {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[FaultKind]int, len(in.counts))
	for k, v := range in.counts {
		out[k] = v
	}
	return out, append([]FaultEvent(nil), in.events...)
}

type faultKey struct{}

func faultOf(ctx context.Context) FaultKind {
	k, _ := ctx.Value(faultKey{}).(FaultKind)
	return k
}

// wrap injects a drawn fault around the batch route.
func (in *injector) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if in.cfg.Latency > 0 {
			t := time.NewTimer(in.cfg.Latency)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		key, _ := operation.ParseIdempotencyKey(r.Header.Get(operation.HeaderIdempotencyKey))
		kind := in.draw(key)
		switch kind {
		case FaultStatus429:
			operation.WriteError(w, http.StatusTooManyRequests, operation.CodeRateLimited, "Too many requests (injected)",
				&operation.RetryExtension{Allowed: true, After: time.Second, Strategy: operation.StrategyFixed, MaxAttempts: 20}, nil)
			return
		case FaultStatus503:
			w.Header().Set("Retry-After", "1")
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "unavailable (injected)", nil, nil)
			return
		case FaultHTML502:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html><body><h1>502 Bad Gateway</h1><p>nginx (injected)</p></body></html>"))
			return
		case FaultProcessing409:
			operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress (injected)",
				&operation.RetryExtension{Allowed: true, After: time.Second, Strategy: operation.StrategyFixed}, nil)
			return
		case FaultDropAfterStore, FaultCutBody:
			rec := &captureWriter{header: http.Header{}}
			next.ServeHTTP(rec, r)
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return // cannot hijack (HTTP/2): the answer is simply lost
			}
			defer conn.Close()
			if kind == FaultCutBody {
				writeCut(buf, rec)
			}
			return
		case FaultOmitResults:
			r = r.WithContext(context.WithValue(r.Context(), faultKey{}, kind))
		}
		next.ServeHTTP(w, r)
	})
}

// writeCut sends the status and headers with a Content-Length twice the
// real one, then half the body: the client cannot mistake it for whole.
func writeCut(buf *bufio.ReadWriter, rec *captureWriter) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	rec.header.Set("Content-Length", strconv.Itoa(2*len(rec.body)+1))
	_ = rec.header.Write(buf)
	buf.WriteString("\r\n")
	buf.Write(rec.body[:len(rec.body)/2])
	_ = buf.Flush()
}

// captureWriter keeps an answer instead of sending it.
type captureWriter struct {
	header http.Header
	status int
	body   []byte
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.body = append(c.body, b...)
	return len(b), nil
}
