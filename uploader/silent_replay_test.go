package uploader_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

type connKey struct{}

// Issue 9 item 11: net/http replays a request that carries an
// Idempotency-Key on its own when a reused connection fails after the
// request was written. Every resend of a batch must go through the
// observed path: counted in the report's resends and in the journal's
// sends, as many as the provider received.
func TestEveryResendOfABatchIsCountedEvenWhenAReusedConnectionFails(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		posts = map[string]int{}
		cut   atomic.Bool
	)
	f, _ := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served := r.Context().Value(connKey{}).(*atomic.Int32)
		reused := served.Add(1) > 1
		if r.Method == http.MethodPost {
			mu.Lock()
			posts[r.Header.Get("Idempotency-Key")]++
			mu.Unlock()
			// The first POST on a reused connection is read whole, then the
			// connection breaks before any answer.
			if reused && cut.CompareAndSwap(false, true) {
				_, _ = io.Copy(io.Discard, r.Body)
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
		}
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"api_version":"v1","max_batch_tiles":4,"max_batch_bytes":1048576,"max_tile_bytes":65536}`))
			return
		}
		f.batch(w, r)
	}))
	hs.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int32))
	}
	hs.Start()
	t.Cleanup(hs.Close)

	c := providertest.NewClient(t, "fr")
	c.AddTiles(t, "fr", 4, 256, 11) // one batch, sent after the capabilities GET on the same connection
	u, _ := newUploader(t, hs.URL, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fr", Concurrency: 1})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !cut.Load() {
		t.Fatal("no connection was reused for a POST: the test did not exercise the failure")
	}
	if rep.Uploaded() != 4 {
		t.Fatalf("report %+v, want 4 uploaded", rep)
	}
	var sends int
	if err := c.Store.Pool().QueryRow(context.Background(), `SELECT sends FROM upload_batches`).Scan(&sends); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 {
		t.Fatalf("posts per key %v, want one key", posts)
	}
	// Every POST the provider got is counted; a write to a connection the
	// server had closed, which it never got, is counted too.
	for key, n := range posts {
		if rep.Resends < n-1 || sends < n || sends != rep.Resends+1 {
			t.Errorf("provider got %d POSTs with key %s; report says %d resend(s), journal %d send(s): want at least %d and %d, one send per resend plus the first",
				n, key, rep.Resends, sends, n-1, n)
		}
	}
}
