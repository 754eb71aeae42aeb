package optable_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/optable"
	"github.com/tilectl/tilectl/provider/optable/optabletest"
)

func seqStores(t *testing.T) map[string]func() optable.SequenceStore {
	return map[string]func() optable.SequenceStore{
		"memory":   func() optable.SequenceStore { return optable.NewMemorySequenceStore() },
		"postgres": func() optable.SequenceStore { pool := newPGPool(t); return optable.NewPGSequenceStore(pool) },
	}
}

type seqServer struct {
	t      *testing.T
	srv    *httptest.Server
	runs   atomic.Int32
	status atomic.Int32
}

func newSeqServer(t *testing.T, store optable.SequenceStore, o optable.SequencerOptions) *seqServer {
	s := &seqServer{t: t}
	s.status.Store(200)
	q := optable.NewSequencer(store, o)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/batch", optable.SequenceMiddleware(q, nil, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.runs.Add(1)
		w.WriteHeader(int(s.status.Load()))
		_, _ = w.Write([]byte(`{"run":` + strconv.Itoa(int(n)) + `}`))
	})))
	mux.Handle("GET /v1/clients/{client_id}/state", optable.ClientStateHandler(q, nil))
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *seqServer) send(client string, n int) answer {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/batch", strings.NewReader("{}"))
	if client != "" {
		req.Header.Set(operation.HeaderClientID, client)
		req.Header.Set(operation.HeaderClientSequence, strconv.Itoa(n))
	}
	return do(s.t, req)
}

func (s *seqServer) last(client string) uint64 {
	s.t.Helper()
	a := do(s.t, mustReq(s.t, http.MethodGet, s.srv.URL+"/v1/clients/"+client+"/state"))
	var b operation.ClientStateResponse
	if a.status != 200 || json.Unmarshal(a.body, &b) != nil || b.ClientID != client {
		s.t.Fatalf("client state: %d %s", a.status, a.body)
	}
	return b.LastCommittedSequence
}

func mustReq(t *testing.T, method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestSequencing covers seq.next, seq.duplicate.cached, seq.gap,
// seq.failed-consumes-none, seq.client-state and seq.optional.
func TestSequencing(t *testing.T) {
	for name, mk := range seqStores(t) {
		t.Run(name, func(t *testing.T) {
			s := newSeqServer(t, mk(), optable.SequencerOptions{})
			if a := s.send("", 0); a.status != 200 { // seq.optional: no Client-Id, no sequencing
				t.Fatalf("unsequenced request: %d", a.status)
			}
			first := s.send("c1", 1)
			if first.status != 200 || s.last("c1") != 1 {
				t.Fatalf("seq 1: %d, last %d", first.status, s.last("c1"))
			}
			dup := s.send("c1", 1)
			if dup.status != 200 || string(dup.body) != string(first.body) || dup.header.Get(operation.HeaderIdempotentReplayed) != "true" {
				t.Fatalf("duplicate seq 1: %d %s", dup.status, dup.body)
			}
			gap := s.send("c1", 3)
			wantError(t, gap, 409, operation.CodeSequenceGap)
			eb, _ := operation.ParseErrorBody(gap.body)
			var det struct {
				Last *uint64 `json:"last_committed_sequence"`
			}
			if json.Unmarshal(eb.Errors[0].Details, &det) != nil || det.Last == nil || *det.Last != 1 {
				t.Fatalf("gap details %s", eb.Errors[0].Details)
			}
			s.status.Store(500)
			if a := s.send("c1", 2); a.status != 500 || s.last("c1") != 1 {
				t.Fatalf("failed batch: %d, last %d; want 500 and no number consumed", a.status, s.last("c1"))
			}
			s.status.Store(200)
			if a := s.send("c1", 2); a.status != 200 || s.last("c1") != 2 {
				t.Fatalf("seq 2 after failure: %d, last %d", a.status, s.last("c1"))
			}
			if s.last("c2") != 0 {
				t.Fatal("unknown client has a sequence")
			}
			if runs := s.runs.Load(); runs != 4 {
				t.Fatalf("handler ran %d times, want 4", runs)
			}
		})
	}
}

// TestSequencingAlreadyCommitted: seq.duplicate.evicted. A duplicate
// whose outcome left the bounded cache (by size or age) is 409
// ALREADY_COMMITTED and never runs.
func TestSequencingAlreadyCommitted(t *testing.T) {
	clock := optabletest.NewClock()
	s := newSeqServer(t, optable.NewMemorySequenceStore(), optable.SequencerOptions{CacheSize: 2, CacheTTL: time.Minute, Now: clock.Now})
	for n := 1; n <= 3; n++ {
		s.send("c", n)
	}
	wantError(t, s.send("c", 1), 409, operation.CodeAlreadyCommitted) // evicted by size
	if a := s.send("c", 3); a.status != 200 {
		t.Fatalf("cached seq 3: %d", a.status)
	}
	clock.Advance(2 * time.Minute)
	wantError(t, s.send("c", 3), 409, operation.CodeAlreadyCommitted) // evicted by age
	if s.runs.Load() != 3 {
		t.Fatalf("runs %d, want 3", s.runs.Load())
	}
}

// TestSequenceStoreAdvanceOnce: seq.advance.atomic. Concurrent advances to
// the same number (16 connections for Postgres) succeed exactly once.
func TestSequenceStoreAdvanceOnce(t *testing.T) {
	for name, mk := range seqStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			ctx := context.Background()
			for n := uint64(1); n <= 3; n++ {
				var wins atomic.Int32
				var wg sync.WaitGroup
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ok, err := st.Advance(ctx, "s", "c", n)
						if err != nil {
							t.Error(err)
						}
						if ok {
							wins.Add(1)
						}
					}()
				}
				wg.Wait()
				if wins.Load() != 1 {
					t.Fatalf("advance to %d won %d times", n, wins.Load())
				}
			}
			if ok, _ := st.Advance(ctx, "s", "c", 5); ok {
				t.Fatal("advance across a gap succeeded")
			}
			if last, _ := st.Last(ctx, "s", "c"); last != 3 {
				t.Fatalf("last %d, want 3", last)
			}
		})
	}
}

func TestSequencerErrorsAreTyped(t *testing.T) {
	q := optable.NewSequencer(optable.NewMemorySequenceStore(), optable.SequencerOptions{})
	ok := func(context.Context) optable.Outcome { return optable.Outcome{Status: 200} }
	_, _, err := q.Do(context.Background(), "", "c", 2, optable.Batch{Run: ok})
	var gap *optable.SequenceGapError
	if !errors.As(err, &gap) || gap.LastCommitted != 0 {
		t.Fatalf("gap: %v", err)
	}
}
