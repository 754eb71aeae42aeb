package uploader_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// contractAnswer is one error answer of docs/provider-api.md's table of
// defaults ("Errors: any non-2xx"), or one the retry advice changes, with
// the table's "retry by default" (or the advice's word).
type contractAnswer struct {
	name    string
	status  int
	code    string
	header  map[string]string
	retry   *operation.RetryExtension
	resends bool
}

func (c contractAnswer) write(w http.ResponseWriter) {
	for k, v := range c.header {
		w.Header().Set(k, v)
	}
	operation.WriteError(w, c.status, c.code, "scripted", c.retry, nil)
}

var contractAnswers = []contractAnswer{
	{name: "400 INVALID_REQUEST", status: 400, code: operation.CodeInvalidRequest},
	{name: "400 IDEMPOTENCY_KEY_MISSING", status: 400, code: operation.CodeIdempotencyKeyMissing},
	{name: "401 UNAUTHENTICATED", status: 401, code: operation.CodeUnauthenticated},
	{name: "403 FORBIDDEN", status: 403, code: operation.CodeForbidden},
	{name: "404 FLIGHT_NOT_FOUND", status: 404, code: operation.CodeFlightNotFound},
	{name: "409 IDEMPOTENCY_PROCESSING", status: 409, code: operation.CodeIdempotencyProcessing, resends: true},
	{name: "413 BATCH_TOO_LARGE", status: 413, code: operation.CodeBatchTooLarge},
	{name: "422 IDEMPOTENCY_CONFLICT", status: 422, code: operation.CodeIdempotencyConflict},
	{name: "422 IDEMPOTENCY_EXPIRED", status: 422, code: operation.CodeIdempotencyExpired},
	{name: "429 RATE_LIMITED", status: 429, code: operation.CodeRateLimited, resends: true},
	{name: "429 RATE_LIMITED Retry-After", status: 429, code: operation.CodeRateLimited, header: map[string]string{"Retry-After": "1"}, resends: true},
	{name: "500 INTERNAL_ERROR", status: 500, code: operation.CodeInternalError, resends: true},
	{name: "500 INDETERMINATE", status: 500, code: operation.CodeIndeterminate, resends: true},
	{name: "502 DEPENDENCY_ERROR", status: 502, code: operation.CodeDependencyError, resends: true},
	{name: "503 UNAVAILABLE", status: 503, code: operation.CodeUnavailable, resends: true},
	{name: "503 UNAVAILABLE Retry-After", status: 503, code: operation.CodeUnavailable, header: map[string]string{"Retry-After": "1"}, resends: true},
	{name: "503 retry not allowed", status: 503, code: operation.CodeUnavailable, retry: &operation.RetryExtension{Allowed: false}},
	{name: "504 DEADLINE_EXCEEDED", status: 504, code: operation.CodeDeadlineExceeded, resends: true},
	{name: "400 retry allowed", status: 400, code: operation.CodeInvalidRequest,
		retry: &operation.RetryExtension{Allowed: true, After: 10 * time.Millisecond, Strategy: operation.StrategyFixed}, resends: true},
}

// firstThen is a provider whose every route answers its first request
// with one scripted answer and every later one as the contract's success
// (a batch: every tile accepted), counting the requests of each route.
type firstThen struct {
	first contractAnswer
	mu    sync.Mutex
	hits  map[string]int
}

func (p *firstThen) hit(route string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hits[route]++
	return p.hits[route]
}

func (p *firstThen) count(route string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[route]
}

func startFirstThen(t *testing.T, first contractAnswer, scripted string) (*firstThen, *fakeProvider, *httptest.Server) {
	p := &firstThen{first: first, hits: map[string]int{}}
	answer := func(route string, w http.ResponseWriter, ok any) bool {
		if p.hit(route) == 1 && route == scripted {
			first.write(w)
			return true
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ok)
		return false
	}
	f, _ := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		if p.hit("batch") == 1 && scripted == "batch" {
			first.write(w)
			return
		}
		answerAll(w, b, "accepted")
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) {
		answer("capabilities", w, f.caps)
	})
	mux.HandleFunc("POST /v1/flights/{flight}/tiles:batch", f.batch)
	mux.HandleFunc("GET /v1/flights/{flight}/tiles/{tile}", func(w http.ResponseWriter, r *http.Request) {
		answer("lookup", w, map[string]any{"tile_id": r.PathValue("tile"), "sha256": strings.Repeat("a", 64), "size": 1})
	})
	mux.HandleFunc("GET /v1/operations/{op}", func(w http.ResponseWriter, r *http.Request) {
		answer("operation", w, map[string]any{"op_id": r.PathValue("op"), "state": "absent"})
	})
	mux.HandleFunc("GET /v1/clients/{client}/state", func(w http.ResponseWriter, r *http.Request) {
		answer("client_state", w, map[string]any{"client_id": r.PathValue("client"), "last_committed_sequence": 0})
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return p, f, hs
}

// TestEveryRequestPathResendsWhatTheOneClassifierResends pins the one
// classifier: every answer of the contract's table (and the advice that
// changes it), given as the first answer to each request path of the
// uploader, is resent by that path exactly when the contract says it is
// retried, and exactly when the classifier says so: no path decides on
// its own.
func TestEveryRequestPathResendsWhatTheOneClassifierResends(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "os-0")
	paths := []struct {
		route string
		run   func(ctx context.Context, u *uploader.Client, flight string)
	}{
		{"batch", func(ctx context.Context, u *uploader.Client, flight string) {
			_, _ = u.UploadPendingTiles(ctx, uploader.Request{FlightID: flight, Concurrency: 1})
		}},
		{"capabilities", func(ctx context.Context, u *uploader.Client, _ string) { _, _ = u.Capabilities(ctx) }},
		{"lookup", func(ctx context.Context, u *uploader.Client, flight string) {
			_, _ = u.LookUpTile(ctx, flight, tilestore.Tile{ID: flight + "-000000", FlightID: flight, SHA256: strings.Repeat("a", 64), SizeBytes: 1})
		}},
		{"operation", func(ctx context.Context, u *uploader.Client, _ string) { _ = u.ReadOperation(ctx, operation.NewID()) }},
		{"client_state", func(ctx context.Context, u *uploader.Client, _ string) { _, _ = u.ClientState(ctx, "client-1") }},
	}
	n := 0
	for _, ans := range contractAnswers {
		rec := httptest.NewRecorder()
		ans.write(rec)
		if got := uploader.ClassifierResends(rec.Code, rec.Header(), rec.Body.Bytes()); got != ans.resends {
			t.Errorf("%s: the classifier resends it: %v, the contract: %v", ans.name, got, ans.resends)
		}
		for _, path := range paths {
			n++
			flight := fmt.Sprintf("os-%d", n)
			if path.route == "batch" {
				if _, err := c.Store.UpsertFlight(context.Background(), flight, tilestore.FlightOnGround); err != nil {
					t.Fatal(err)
				}
				c.AddTiles(t, flight, 2, 512, int64(n))
			}
			t.Run(ans.name+"/"+path.route, func(t *testing.T) {
				t.Parallel()
				p, _, hs := startFirstThen(t, ans, path.route)
				u, _ := newUploader(t, hs.URL, c, nil)
				if path.route != "capabilities" {
					// The run's first contact is not the path under test.
					if _, err := u.Capabilities(testCtx(t)); err != nil {
						t.Fatalf("capabilities: %v", err)
					}
				}
				// The table's longest wait (429's 60 s) fits the run's
				// deadline; the waits themselves are not slept.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				path.run(ctx, u, flight)
				want := 1
				if ans.resends {
					want = 2
				}
				if got := p.count(path.route); got != want {
					t.Fatalf("%s answered %s first: %d request(s), want %d (resent: %v)", path.route, ans.name, got, want, ans.resends)
				}
			})
		}
	}
}

// A tile lookup's Final and Strained are the classifier's: Final when it
// does not resend the last answer, Strained when the lookup took resends
// or its last answer is a throttle or a timeout. An answer that ends the
// lookup without load (a 400, a gateway's 404) strains nothing: a caller
// pacing many lookups does not ease off for it.
func TestALookupsFinalAndStrainedAreTheClassifiers(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "lf")
	cases := []struct {
		name            string
		answer          func(w http.ResponseWriter)
		final, strained bool
	}{
		{"400 INVALID_REQUEST", func(w http.ResponseWriter) {
			operation.WriteError(w, http.StatusBadRequest, operation.CodeInvalidRequest, "no", nil, nil)
		}, true, false},
		{"404 without TILE_NOT_FOUND", func(w http.ResponseWriter) { http.Error(w, "404 page not found", http.StatusNotFound) }, true, false},
		{"503 whose resend is forbidden", func(w http.ResponseWriter) {
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "down", &operation.RetryExtension{Allowed: false}, nil)
		}, true, true},
		{"503 on every resend", func(w http.ResponseWriter) {
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "busy", nil, nil)
		}, false, true},
		{"500 INTERNAL_ERROR until its 3 attempts are spent", func(w http.ResponseWriter) {
			operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "oops", nil, nil)
		}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/flights/{flight}/tiles/{tile}", func(w http.ResponseWriter, r *http.Request) { tc.answer(w) })
			hs := httptest.NewServer(mux)
			t.Cleanup(hs.Close)
			u, _ := newUploader(t, hs.URL, c, nil)
			l, err := u.LookUpTile(testCtx(t), "lf", tilestore.Tile{ID: "lf-000000", FlightID: "lf", SHA256: strings.Repeat("a", 64)})
			if err != nil {
				t.Fatal(err)
			}
			if l.Verdict != uploader.Unclear || l.Final != tc.final || l.Strained != tc.strained {
				t.Fatalf("lookup = %+v, want unclear, final %v, strained %v", l, tc.final, tc.strained)
			}
		})
	}
}
