package uploader_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// seqReq is one batch request as the provider saw it, and its answer.
type seqReq struct {
	Client, Key string
	Seq         uint64 // 0 when the request carried none
	Status      int
	Code        string // the error code of a non-2xx answer
}

// seqRecorder sits in front of the reference provider and records every
// batch request's client sequence and answer, and how many were being
// answered at once. capsMaxTiles > 0 makes GET /v1/capabilities claim that
// max_batch_tiles, whatever the provider enforces; hideOperations makes
// GET /v1/operations/{op_id} answer 404, as a provider that kept no record.
// forgetCommitted answers every replayed answer to a sequenced batch 409
// ALREADY_COMMITTED, as a provider that keeps committed outcomes only in
// a bounded cache (the contract allows it; the reference provider replays
// the batch's sealed record).
type seqRecorder struct {
	mu              sync.Mutex
	reqs            []seqReq
	inFlight        int
	maxInFlight     int
	capsMaxTiles    int
	hideOperations  bool
	forgetCommitted bool
}

func (r *seqRecorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.capsMaxTiles > 0 && req.URL.Path == "/v1/capabilities" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"api_version": "v1", "max_batch_tiles": r.capsMaxTiles,
				"max_batch_bytes": 32 << 20, "max_tile_bytes": 4 << 20, "idempotency": map[string]any{"retention_seconds": 86400}})
			return
		}
		if r.hideOperations && strings.HasPrefix(req.URL.Path, "/v1/operations/") {
			operation.WriteError(w, http.StatusNotFound, "NOT_FOUND", "no such operation", nil, nil)
			return
		}
		if req.Method != http.MethodPost {
			h.ServeHTTP(w, req)
			return
		}
		r.mu.Lock()
		r.inFlight++
		r.maxInFlight = max(r.maxInFlight, r.inFlight)
		r.mu.Unlock()
		// The answer is recorded before the client can see it, so a run
		// that ended has every one of its requests recorded.
		sw := httptest.NewRecorder()
		h.ServeHTTP(sw, req)
		if r.forgetCommitted && req.Header.Get(operation.HeaderClientID) != "" && sw.Header().Get(operation.HeaderIdempotentReplayed) == "true" {
			sw = httptest.NewRecorder()
			operation.WriteError(sw, http.StatusConflict, operation.CodeAlreadyCommitted,
				"this sequence number is committed and its outcome is no longer cached", nil, nil)
		}
		n, _ := strconv.ParseUint(req.Header.Get(operation.HeaderClientSequence), 10, 64)
		rec := seqReq{Client: req.Header.Get(operation.HeaderClientID), Key: req.Header.Get(operation.HeaderIdempotencyKey),
			Seq: n, Status: sw.Code}
		if sw.Code >= 400 {
			eb, _ := operation.ParseErrorBody(sw.Body.Bytes())
			rec.Code = eb.Code()
		}
		r.mu.Lock()
		r.inFlight--
		r.reqs = append(r.reqs, rec)
		r.mu.Unlock()
		for k, v := range sw.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(sw.Code)
		_, _ = w.Write(sw.Body.Bytes())
	})
}

func (r *seqRecorder) mostInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxInFlight
}

func (r *seqRecorder) all() []seqReq {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// strictProvider starts the reference provider in strict sequencing mode
// behind a recorder and returns the recorder's URL.
func strictProvider(t *testing.T, edit func(*provider.Config)) (*providertest.Provider, *seqRecorder, string) {
	t.Helper()
	p := providertest.Start(t, func(c *provider.Config) {
		c.StrictSequencing = true
		if edit != nil {
			edit(c)
		}
	})
	rec := &seqRecorder{}
	hs := httptest.NewServer(rec.wrap(p.Server.Handler()))
	t.Cleanup(hs.Close)
	return p, rec, hs.URL
}

// serverLast is the provider's GET /v1/clients/{id}/state.
func serverLast(t *testing.T, p *providertest.Provider, client string) uint64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/v1/clients/"+client+"/state", nil)
	req.Header.Set("Authorization", "Bearer "+providertest.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st operation.ClientStateResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("client state: %d %v", resp.StatusCode, err)
	}
	return st.LastCommittedSequence
}

// committedNumbersAreContiguous checks that the numbers the provider
// answered 2xx for are exactly 1..its last committed, and returns it.
func committedNumbersAreContiguous(t *testing.T, p *providertest.Provider, rec *seqRecorder, client string) uint64 {
	t.Helper()
	last := serverLast(t, p, client)
	got := map[uint64]bool{}
	for _, r := range rec.all() {
		if r.Client == client && r.Status >= 200 && r.Status < 300 {
			got[r.Seq] = true
		}
	}
	for n := uint64(1); n <= last; n++ {
		if !got[n] {
			t.Errorf("number %d is committed at the provider but no request was answered 2xx with it: %+v", n, rec.all())
		}
	}
	if uint64(len(got)) != last {
		t.Errorf("2xx answers for numbers %v, want exactly 1..%d", got, last)
	}
	return last
}
