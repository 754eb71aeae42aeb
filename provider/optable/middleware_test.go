package optable_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/optable"
	"github.com/tilectl/tilectl/provider/optable/optabletest"
)

// waitSignal is a Store that reports each duplicate that starts waiting,
// so a test can release a live owner once its duplicates are attached
// without sleeping.
type waitSignal struct {
	optable.Store
	waiting chan struct{}
}

func (w *waitSignal) Wait(ctx context.Context, k optable.Key, gen uint64) (optable.Record, error) {
	w.waiting <- struct{}{}
	return w.Store.Wait(ctx, k, gen)
}

// mwServer is a loopback server with the middleware in front of a handler
// that counts its executions.
type mwServer struct {
	t     *testing.T
	srv   *httptest.Server
	table *optable.Table
	clock *optabletest.Clock
	store optable.Store
	runs  atomic.Int32
	// gate, when set, blocks the handler until it is closed.
	gate    chan struct{}
	started chan struct{}
	status  int
	logs    lockedBuffer // the middleware's log, JSON lines
}

// lockedBuffer is a bytes.Buffer the server's goroutines write to at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newMWServer(t *testing.T, store optable.Store, pol optable.Policy, wait time.Duration) *mwServer {
	t.Helper()
	s := &mwServer{t: t, clock: optabletest.NewClock(), store: store, status: http.StatusOK, started: make(chan struct{}, 100)}
	s.table = optable.NewTable(store, optable.TableOptions{Retention: time.Hour, Now: s.clock.Now})
	s.srv = httptest.NewServer(s.mux(pol, wait))
	t.Cleanup(s.srv.Close)
	return s
}

// block makes the handler wait until the returned release is called (or
// the test ends: a handler still blocked would hang the server's Close).
func (s *mwServer) block() (release func()) {
	gate := make(chan struct{})
	s.gate = gate
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	s.t.Cleanup(release)
	return release
}

func (s *mwServer) mux(pol optable.Policy, wait time.Duration) *http.ServeMux {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.runs.Add(1)
		s.started <- struct{}{}
		if s.gate != nil {
			<-s.gate
		}
		body, _ := io.ReadAll(r.Body) // the fingerprint left the body readable
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Run", string(rune('0'+n)))
		w.WriteHeader(s.status)
		_, _ = w.Write([]byte(`{"run":` + string(rune('0'+n)) + `,"echo":` + string(body) + "}"))
	})
	mw := optable.IdempotencyMiddleware(s.table, optable.MiddlewareOptions{
		Method: "upload-batch", Policy: pol, WaitLive: wait,
		Scope: func(r *http.Request) string { return r.Header.Get("X-Caller") },
		Log:   zerolog.New(&s.logs),
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/batch", mw(h))
	mux.Handle("GET /v1/operations/{op_id}", optable.OperationStateHandler(s.table,
		func(r *http.Request) string { return r.Header.Get("X-Caller") }))
	return mux
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (s *mwServer) post(key, body string, hdr ...string) answer {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/batch", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(operation.HeaderIdempotencyKey, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(s.t, req)
}

func (s *mwServer) get(path string) answer {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return do(s.t, req)
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.URL, err)
		return answer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("read body: %v", err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func errCode(t *testing.T, a answer) string {
	t.Helper()
	eb, err := operation.ParseErrorBody(a.body)
	if err != nil {
		t.Fatalf("error body %q: %v", a.body, err)
	}
	return eb.Code()
}

func wantError(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.status != status || errCode(t, a) != code {
		t.Fatalf("got %d %s, want %d %s", a.status, a.body, status, code)
	}
}

const key1 = "key-0123456789abcdef"

func TestMiddlewareKeyMissing(t *testing.T) { // http.key.missing
	s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{}, 0)
	wantError(t, s.post("", `{}`), 400, operation.CodeIdempotencyKeyMissing)
	wantError(t, s.post(`""`, `{}`), 400, operation.CodeIdempotencyKeyMissing)
	if s.runs.Load() != 0 {
		t.Fatal("handler ran without a key")
	}
}

func TestMiddlewareKeyMalformed(t *testing.T) { // http.key.malformed
	s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{}, 0)
	for _, k := range []string{"short", strings.Repeat("a", 129), "key-with-a-space-in it", "key.with.dots.0000", `"unterminated-quote-000`} {
		wantError(t, s.post(k, `{}`), 400, operation.CodeInvalidRequest)
	}
	if s.runs.Load() != 0 {
		t.Fatal("handler ran with a malformed key")
	}
	// A quoted key names the same operation as the bare one.
	first := s.post(`"`+key1+`"`, `{"a":1}`)
	again := s.post(key1, `{"a":1}`)
	if first.status != 200 || again.header.Get(operation.HeaderIdempotentReplayed) != "true" || s.runs.Load() != 1 {
		t.Fatalf("quoted then bare key: %d, %d replayed=%q, runs %d", first.status, again.status,
			again.header.Get(operation.HeaderIdempotentReplayed), s.runs.Load())
	}
}

// TestMiddlewareReplayByteForByte: http.key.new, http.finished.replay.
func TestMiddlewareReplayByteForByte(t *testing.T) {
	for _, status := range []int{http.StatusOK, http.StatusNotFound} { // success and sealed failure
		s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{}, 0)
		s.status = status
		first := s.post(key1, `{"tiles":[1,2]}`)
		if first.status != status || first.header.Get(operation.HeaderIdempotentReplayed) != "" {
			t.Fatalf("first answer %d replayed=%q", first.status, first.header.Get(operation.HeaderIdempotentReplayed))
		}
		for range 3 {
			again := s.post(key1, `{"tiles":[1,2]}`)
			if again.status != first.status || !bytes.Equal(again.body, first.body) {
				t.Fatalf("replay %d %q, first %d %q", again.status, again.body, first.status, first.body)
			}
			if again.header.Get(operation.HeaderIdempotentReplayed) != "true" || again.header.Get("X-Run") != "1" ||
				again.header.Get("Content-Type") != "application/json" {
				t.Fatalf("replay headers %v", again.header)
			}
		}
		if s.runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", s.runs.Load())
		}
	}
}

func TestMiddlewareConflict(t *testing.T) { // http.fingerprint.conflict
	s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{}, 0)
	s.post(key1, `{"a":1}`)
	wantError(t, s.post(key1, `{"a":2}`), 422, operation.CodeIdempotencyConflict)
	if s.runs.Load() != 1 {
		t.Fatalf("conflict executed: %d runs", s.runs.Load())
	}
}

func TestMiddlewareExpired(t *testing.T) { // http.expired
	s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{}, 0)
	s.post(key1, `{"a":1}`)
	s.clock.Advance(time.Hour)
	wantError(t, s.post(key1, `{"a":1}`), 422, operation.CodeIdempotencyExpired)
	wantError(t, s.post(key1, `{"other":1}`), 422, operation.CodeIdempotencyExpired)
	if s.runs.Load() != 1 {
		t.Fatalf("expired key executed: %d runs", s.runs.Load())
	}
}

func TestMiddlewareScopedByCaller(t *testing.T) { // http.scope
	s := newMWServer(t, optable.NewMemoryStore(), optable.Policy{}, 0)
	a := s.post(key1, `{}`, "X-Caller", "alice")
	b := s.post(key1, `{}`, "X-Caller", "bob")
	if a.status != 200 || b.status != 200 || s.runs.Load() != 2 || b.header.Get(operation.HeaderIdempotentReplayed) != "" {
		t.Fatalf("two callers, one key: %d %d, runs %d", a.status, b.status, s.runs.Load())
	}
}

// flakyFinish is a Store whose Finish fails a number of times first, as a
// database that is restarting does.
type flakyFinish struct {
	optable.Store
	failures atomic.Int32
}

func (f *flakyFinish) Finish(ctx context.Context, k optable.Key, gen uint64, fin optable.Finish) (optable.Record, error) {
	if f.failures.Add(-1) >= 0 {
		return optable.Record{}, io.ErrUnexpectedEOF
	}
	return f.Store.Finish(ctx, k, gen, fin)
}

// An owner whose Seal meets a store that is briefly down (a database
// restart) seals once it is back, instead of leaving its record Live and
// every resend answered 409 IDEMPOTENCY_PROCESSING while the process lives.
func TestOwnerSealsItsOutcomeOnceTheStoreIsBack(t *testing.T) {
	store := &flakyFinish{Store: optable.NewMemoryStore()}
	store.failures.Store(3)
	s := newMWServer(t, store, optable.Policy{Persist: true, Idem: true}, 50*time.Millisecond)
	first := s.post(key1, `{"a":1}`)
	if first.status != http.StatusOK {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	again := s.post(key1, `{"a":1}`)
	if again.status != http.StatusOK || !bytes.Equal(again.body, first.body) || again.header.Get(operation.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("resend: %d %s (replayed %q), want the sealed answer again", again.status, again.body, again.header.Get(operation.HeaderIdempotentReplayed))
	}
	if n := s.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
