package upload

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
)

// The provider's capabilities do not wait for the journal: the request
// reaches the provider while the database holds every read of the
// flight's row (a lock the test takes: the retry decorator's count and
// the flight's state check wait behind it), and the run then finishes
// as usual, the request counted once.
func TestTheCapabilitiesAreAskedWhileTheDatabaseIsStillBusy(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 3)
	target, err := url.Parse(r.prov.URL)
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 8)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && req.URL.Path == "/v1/capabilities" {
			asked <- struct{}{}
		}
		proxy.ServeHTTP(w, req)
	}))
	defer front.Close()
	r.cfg.ProviderURL = front.URL

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := r.store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE flights IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan runResult, 1)
	go func() { done <- r.run(nil, "--flight", "F1", "-o", "json") }()
	select {
	case <-asked:
	case res := <-done:
		t.Fatalf("the run ended (exit %d) before asking the capabilities: %v", res.code, res.err)
	case <-ctx.Done():
		t.Fatal("no capabilities request while the database was busy: the request waited for it")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var res runResult
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("the run did not end once the database was free")
	}
	if res.code != exitcode.OK {
		t.Fatalf("exit %d: %v\n%s", res.code, res.err, res.stderr)
	}
	if n := len(asked); n != 0 {
		t.Errorf("%d more capabilities requests, want the one asked ahead only", n)
	}
	// The request asked ahead counts in the run's report like any other.
	var sum struct {
		Requests      int `json:"requests"`
		FirstAttempts int `json:"first_attempts"`
		Batches       int `json:"batches"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, res.stdout)
	}
	if sum.Batches != 1 || sum.Requests != 2 || sum.FirstAttempts != 2 {
		t.Errorf("batches %d, requests %d, first attempts %d; want 1 batch and 2 requests (the capabilities and the batch), each a first attempt",
			sum.Batches, sum.Requests, sum.FirstAttempts)
	}
}
