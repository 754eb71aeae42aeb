package optable_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/optable"
)

// TestMiddlewareConcurrentDuplicatesExecuteOnce: http.in-progress.wait.
func TestMiddlewareConcurrentDuplicatesExecuteOnce(t *testing.T) {
	store := &waitSignal{Store: optable.NewMemoryStore(), waiting: make(chan struct{}, 100)}
	s := newMWServer(t, store, optable.Policy{}, time.Minute)
	release := s.block()
	const dups = 8
	answers := make(chan answer, dups+1)
	go func() { answers <- s.post(key1, `{"x":1}`) }()
	<-s.started
	for range dups {
		go func() { answers <- s.post(key1, `{"x":1}`) }()
	}
	for range dups {
		<-store.waiting // every duplicate is attached to the live operation
	}
	release()
	var bodies [][]byte
	replayed := 0
	for range dups + 1 {
		a := <-answers
		if a.status != 200 {
			t.Fatalf("answer %d %s", a.status, a.body)
		}
		if a.header.Get(operation.HeaderIdempotentReplayed) == "true" {
			replayed++
		}
		bodies = append(bodies, a.body)
	}
	for _, b := range bodies {
		if !bytes.Equal(b, bodies[0]) {
			t.Fatalf("answers differ: %q vs %q", b, bodies[0])
		}
	}
	if s.runs.Load() != 1 || replayed != dups {
		t.Fatalf("runs %d (want 1), replayed %d (want %d)", s.runs.Load(), replayed, dups)
	}
}

func TestMiddlewareInProgressProcessing(t *testing.T) { // http.in-progress.processing
	s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{}, -1)
	release := s.block()
	done := make(chan answer, 1)
	go func() { done <- s.post(key1, `{}`) }()
	<-s.started
	a := s.post(key1, `{}`)
	wantError(t, a, 409, operation.CodeIdempotencyProcessing)
	eb, _ := operation.ParseErrorBody(a.body)
	if ext, ok := eb.Retry(); !ok || !ext.Allowed || ext.After != time.Second {
		t.Fatalf("409 retry extension %+v %v, want allowed after 1s", ext, ok)
	}
	release()
	if first := <-done; first.status != 200 || s.runs.Load() != 1 {
		t.Fatalf("owner %d, runs %d", first.status, s.runs.Load())
	}
}

// TestMiddlewareIndeterminate: http.indeterminate.idem, http.indeterminate.non-idem.
// The "crash" is a new table over the same store, recovered, while the
// first handler is still blocked: its owner died with the old process.
func TestMiddlewareIndeterminate(t *testing.T) {
	for _, idem := range []bool{true, false} {
		store := optable.NewMemoryStore()
		pol := optable.Policy{Persist: true, Idem: idem}
		old := newMWServer(t, store, pol, -1)
		release := old.block()
		go old.post(key1, `{"b":1}`)
		<-old.started

		restarted := newMWServer(t, store, pol, -1)
		if _, err := restarted.table.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		a := restarted.post(key1, `{"b":1}`)
		if idem {
			if a.status != 200 || restarted.runs.Load() != 1 {
				t.Fatalf("idem after crash: %d %s, runs %d; want it run again", a.status, a.body, restarted.runs.Load())
			}
		} else {
			wantError(t, a, 500, operation.CodeIndeterminate)
			if restarted.runs.Load() != 0 {
				t.Fatal("non-idem ran again after a crash")
			}
		}
		release()
	}
}

// TestMiddlewareTransientNotSealedForIdem: an idem method's 503 frees the
// key, so the retry runs again; a non-idem method's 503 is sealed.
func TestMiddlewareTransientNotSealedForIdem(t *testing.T) {
	for _, idem := range []bool{true, false} {
		s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{Idem: idem}, 0)
		s.status = http.StatusServiceUnavailable
		s.post(key1, `{}`)
		s.status = http.StatusOK
		a := s.post(key1, `{}`)
		wantRuns := int32(1)
		wantStatus := 503
		if idem {
			wantRuns, wantStatus = 2, 200
		}
		if s.runs.Load() != wantRuns || a.status != wantStatus {
			t.Fatalf("idem=%v: retry %d, runs %d; want %d, %d", idem, a.status, s.runs.Load(), wantStatus, wantRuns)
		}
	}
}

// TestMiddlewareDroppedInterest: http.cancel.implicit.volatile/persist. A
// volatile handler that gives up on a cancelled request releases the
// operation; a persist handler never sees the cancellation.
func TestMiddlewareDroppedInterest(t *testing.T) {
	for _, persist := range []bool{false, true} {
		table := optable.NewTable(optable.NewMemoryStore(), optable.TableOptions{})
		sawCancel := false
		h := optable.IdempotencyMiddleware(table, optable.MiddlewareOptions{Policy: optable.Policy{Persist: persist}})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Context().Err() != nil {
					sawCancel = true
					return // gave up, wrote nothing
				}
				w.WriteHeader(http.StatusCreated)
			}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/batch", strings.NewReader("{}"))
		req.Header.Set(operation.HeaderIdempotencyKey, key1)
		h.ServeHTTP(httptest.NewRecorder(), req)
		st, _, err := table.Lookup(context.Background(), optable.Key{OpID: key1})
		if err != nil {
			t.Fatal(err)
		}
		if persist && (sawCancel || st != optable.StateSealed) {
			t.Fatalf("persist: handler saw cancel %v, state %s; want it to run on and seal", sawCancel, st)
		}
		if !persist && (!sawCancel || st != optable.StateReleased) {
			t.Fatalf("volatile: handler saw cancel %v, state %s; want released", sawCancel, st)
		}
	}
}

func TestMiddlewarePanicAbandons(t *testing.T) { // http.handler.panic
	table := optable.NewTable(optable.NewMemoryStore(), optable.TableOptions{})
	h := optable.IdempotencyMiddleware(table, optable.MiddlewareOptions{Policy: optable.Policy{Persist: true}})(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	req := httptest.NewRequest(http.MethodPost, "/v1/batch", strings.NewReader("{}"))
	req.Header.Set(operation.HeaderIdempotencyKey, key1)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	if st, _, _ := table.Lookup(context.Background(), optable.Key{OpID: key1}); st != optable.StateIndeterminate {
		t.Fatalf("after a persist handler panicked: %s, want indeterminate", st)
	}
}

// TestOperationStateHandler: http.state.lookup for every wire state.
func TestOperationStateHandler(t *testing.T) {
	s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{}, -1)
	type stateBody struct {
		OpID    string `json:"op_id"`
		State   string `json:"state"`
		Outcome *struct {
			Status int             `json:"status"`
			Body   json.RawMessage `json:"body"`
		} `json:"outcome"`
	}
	look := func(id string) stateBody {
		t.Helper()
		a := s.get("/v1/operations/" + id)
		var b stateBody
		if a.status != 200 || json.Unmarshal(a.body, &b) != nil || b.OpID != id {
			t.Fatalf("state of %s: %d %s", id, a.status, a.body)
		}
		return b
	}
	if b := look(key1); b.State != "absent" || b.Outcome != nil {
		t.Fatalf("absent: %+v", b)
	}
	sealed := s.post(key1, `{"q":1}`)
	b := look(key1)
	if b.State != "sealed" || b.Outcome == nil || b.Outcome.Status != 200 || !bytes.Equal(b.Outcome.Body, sealed.body) {
		t.Fatalf("sealed: %+v", b)
	}
	<-s.started // the key1 run
	release := s.block()
	const key2 = "key-live-0000000001"
	go s.post(key2, `{}`)
	<-s.started
	if b := look(key2); b.State != "live" {
		t.Fatalf("live: %+v", b)
	}
	release()
	s.clock.Advance(2 * time.Hour)
	if b := look(key1); b.State != "expired" || b.Outcome != nil {
		t.Fatalf("expired: %+v", b)
	}
	if a := s.get("/v1/operations/bad"); a.status != 400 {
		t.Fatalf("malformed op ID: %d", a.status)
	}
}

func TestFingerprintLeavesBodyReadable(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("payload"))
	fp1, err := optable.BodyFingerprint(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(req.Body)
	fp2, _ := optable.BodyFingerprint(httptest.NewRequest(http.MethodPost, "/", strings.NewReader("payload!")))
	if string(b) != "payload" || fp1 == fp2 {
		t.Fatalf("body after fingerprint %q; fingerprints %s %s", b, fp1, fp2)
	}
}
