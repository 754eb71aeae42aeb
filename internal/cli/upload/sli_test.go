package upload

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
)

// knownRun fronts the rig's provider and spoils the first attempt of the
// first three batches in three ways: a 503, an answer lost after the batch
// was stored, and no answer until the client times out.
type knownRun struct {
	inner http.Handler
	mu    sync.Mutex
	keys  []string
	seen  map[string]int
}

func (k *knownRun) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		k.inner.ServeHTTP(w, r)
		return
	}
	k.mu.Lock()
	if k.seen[key] == 0 {
		k.keys = append(k.keys, key)
	}
	k.seen[key]++
	batch, attempt := len(k.keys), k.seen[key]
	for i, kk := range k.keys {
		if kk == key {
			batch = i + 1
		}
	}
	k.mu.Unlock()
	switch {
	case attempt > 1 || batch > 3:
		k.inner.ServeHTTP(w, r)
	case batch == 1:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"errors": []any{map[string]any{"code": "UNAVAILABLE", "message": "busy"}}})
	case batch == 2:
		k.inner.ServeHTTP(httptest.NewRecorder(), r) // stored, answer lost
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	case batch == 3:
		// Read the body, so that the server notices the client hang up
		// when its request timeout ends the attempt.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}
}

// The README's SLI definitions, computed from a run whose traffic is known:
// 4 batches of 2 tiles, one GET /v1/capabilities, and 3 spoiled first
// attempts (503, lost answer, timeout), so 8 requests of which 5 first
// attempts and 3 resends, 1 timeout, and 1 of 4 answers replayed.
func TestSLIsOfAKnownRunMatchTheirDefinitions(t *testing.T) {
	r := newCmdRig(t)
	r.seed("FS", tilestore.FlightOnGround, 8)
	front := httptest.NewServer(&knownRun{inner: r.srv.Config.Handler, seen: map[string]int{}})
	t.Cleanup(front.Close)
	r.cfg.ProviderURL = front.URL
	r.cfg.Upload.RequestTimeout = time.Second
	metrics := filepath.Join(r.dir, "tilectl.prom")
	res := r.run(func(o *Options) {
		// A fresh connection per request: net/http then never resends
		// a request on its own, so every request is the uploader's.
		o.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		jsonOut(o)
		o.FlightID = "FS"
	}, "--batch-size", "2", "--concurrency", "1", "--metrics-file", metrics)
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	// What the known traffic fixes exactly. A loaded machine may add a
	// resend (a request slower than the 1 s timeout, say), so requests,
	// resends and timeouts are at least the known figures, and the rates
	// must match their definitions over the counts the run reported.
	for k, want := range map[string]float64{"first_attempts": 5, "replayed": 1, "batches": 4, "uploaded": 8,
		"breaker_openings": 0, "resends_refused": 0} {
		if m[k] != want {
			t.Errorf("summary %s = %v, want %v", k, m[k], want)
		}
	}
	for k, least := range map[string]float64{"requests": 8, "resends": 3, "timeouts": 1} {
		if v, _ := m[k].(float64); v < least {
			t.Errorf("summary %s = %v, want at least %v", k, m[k], least)
		}
	}
	requests, resends, timeouts := m["requests"].(float64), m["resends"].(float64), m["timeouts"].(float64)
	if requests != m["first_attempts"].(float64)+resends {
		t.Errorf("requests %v != first attempts %v + resends %v", requests, m["first_attempts"], resends)
	}
	if requests == 8 && (resends != 3 || timeouts != 1) {
		t.Errorf("with no extra request, resends %v timeouts %v; want 3 and 1", resends, timeouts)
	}
	sli := m["sli"].(map[string]any)
	for k, want := range map[string]float64{"retry_rate": resends / requests, "timeout_rate": timeouts / requests,
		"dedup_replay_rate": 1.0 / 4} {
		if sli[k] != want {
			t.Errorf("sli.%s = %v, want %v", k, sli[k], want)
		}
	}
	p50, ok50 := sli["batch_latency_p50_seconds"].(float64)
	p99, ok99 := sli["batch_latency_p99_seconds"].(float64)
	if !ok50 || !ok99 || p50 <= 0 || p99 < p50 || p99 < 1 {
		t.Errorf("latency p50 %v p99 %v: want both known, p99 >= p50 and >= the 1 s the timed-out batch waited", sli["batch_latency_p50_seconds"], sli["batch_latency_p99_seconds"])
	}
	b, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("tilectl_requests_total %v", requests), "tilectl_first_attempts_total 5",
		fmt.Sprintf("tilectl_resends_total %v", resends), fmt.Sprintf("tilectl_timeouts_total %v", timeouts),
		"tilectl_replayed_answers_total 1", "tilectl_breaker_openings_total 0",
		`tilectl_batch_latency_quantile_seconds{quantile="0.5"}`, `tilectl_batch_latency_quantile_seconds{quantile="0.99"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics file lacks %q:\n%s", want, b)
		}
	}
}

func TestSLIRatesAreNullWithoutRequests(t *testing.T) {
	r := newCmdRig(t)
	res := r.run(jsonOut) // no flight has pending tiles: nothing is sent
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
	}
	sli := decodeSummary(t, res.stdout)["sli"].(map[string]any)
	for _, k := range []string{"retry_rate", "timeout_rate", "dedup_replay_rate", "batch_latency_p50_seconds", "batch_latency_p99_seconds"} {
		if v, ok := sli[k]; !ok || v != nil {
			t.Errorf("sli.%s = %v (present %v), want null", k, v, ok)
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
