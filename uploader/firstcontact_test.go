package uploader_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// capsServer answers GET /v1/capabilities through caps (n is the call's
// number, from 1) and accepts every batch.
func capsServer(t *testing.T, caps func(w http.ResponseWriter, n int32)) *httptest.Server {
	t.Helper()
	var calls atomic.Int32
	_, fake := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, _ *http.Request) { caps(w, calls.Add(1)) })
	mux.Handle("/", fake.Config.Handler)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs
}

func writeCaps(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"api_version": "v1", "max_batch_tiles": 4})
}

// The first contact's bound ends a run whose provider says nothing, and
// only that: a provider that answered once, or that answers at first
// contact with a wait, gets the run's usual patience.
func TestFirstContactBoundAppliesOnlyUntilTheProviderAnswers(t *testing.T) {
	t.Parallel()
	const bound, slow = 200 * time.Millisecond, 700 * time.Millisecond
	fast := func(e *uploader.ClientOptions) { e.FirstContactTimeout = bound }

	t.Run("silent at first contact", func(t *testing.T) {
		t.Parallel()
		hs := capsServer(t, func(w http.ResponseWriter, _ int32) { time.Sleep(slow); writeCaps(w) })
		c := providertest.NewClient(t, "fc1")
		c.AddTiles(t, "fc1", 2, 512, 1)
		u, _ := newUploader(t, hs.URL, c, fast)
		start := time.Now()
		_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fc1"})
		var np *uploader.NoProviderError
		if !errors.As(err, &np) || np.FirstContact != bound {
			t.Fatalf("err %v, want a *NoProviderError with FirstContact %s", err, bound)
		}
		if took := time.Since(start); took >= slow {
			t.Errorf("took %s, want the %s bound, not the %s the server needs", took, bound, slow)
		}
	})

	t.Run("slow after answering once", func(t *testing.T) {
		t.Parallel()
		hs := capsServer(t, func(w http.ResponseWriter, n int32) {
			if n > 1 {
				time.Sleep(slow)
			}
			writeCaps(w)
		})
		c := providertest.NewClient(t, "fc2")
		c.AddTiles(t, "fc2", 2, 512, 2)
		u, _ := newUploader(t, hs.URL, c, fast)
		for i := range 2 {
			if _, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fc2"}); err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
		}
	})

	t.Run("answers at first contact with a wait", func(t *testing.T) {
		t.Parallel()
		hs := capsServer(t, func(w http.ResponseWriter, n int32) {
			if n == 1 {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"code":"UNAVAILABLE","message":"maintenance"}`))
				return
			}
			time.Sleep(slow) // past the bound: the 503 was an answer
			writeCaps(w)
		})
		c := providertest.NewClient(t, "fc3")
		c.AddTiles(t, "fc3", 2, 512, 3)
		u, _ := newUploader(t, hs.URL, c, fast)
		rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fc3"})
		if err != nil || rep.Accepted != 2 {
			t.Fatalf("report %+v, err %v; want 2 accepted after the advised wait", rep, err)
		}
	})
}
