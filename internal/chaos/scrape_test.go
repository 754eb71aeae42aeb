package chaos

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// After a round the soak reads the provider's debug routes while the
// database it just restarted may still be starting: a 5xx then is a
// wait, not the end of a 200-round soak.
func TestDebugReadWaitsOutAProviderWhoseDatabaseIsRestarting(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "the database system is starting up", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	b, err := get(context.Background(), srv.URL+"/debug/ledger", "tok")
	if err != nil || string(b) != "ok" || calls.Load() != 3 {
		t.Fatalf("get = %q, %v after %d calls; want ok after 3", b, err, calls.Load())
	}
}

func TestDebugReadDoesNotRetryAClientError(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := get(ctx, srv.URL+"/metrics", "bad"); err == nil || calls.Load() != 1 {
		t.Fatalf("get = %v after %d calls; want a 401 error after 1", err, calls.Load())
	}
}

// A soak stopped by an error reports the rounds that finished, not the
// ones asked for.
func TestAnAbortedSoakReportsTheRoundsItFinished(t *testing.T) {
	rep := &Report{Rounds: 150, AbortedIn: 151, ExitCodes: map[int]int{}, Faults: map[string]int{},
		Checked: map[string]int{"x": 3}}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "150 finished (stopped by an error in round 151)") {
		t.Fatalf("table does not say where the soak stopped:\n%s", out.String())
	}
}
