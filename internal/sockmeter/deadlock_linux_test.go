package sockmeter

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A request's answer is noted while the count in flight is asked for,
// over and over, from another goroutine (the progress line's ETA asks
// while batches are answered): neither waits for the other for good.
// Sixteen clients post 16 KiB bodies for two seconds while InFlight,
// Acked and AnswerLag are asked in a loop; every request ends.
func TestAnswersAndTheCountInFlightDoNotWaitForEachOther(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	m := New(nil, nil)
	c := meteredClient(t, m, func(tr *http.Transport) { tr.MaxIdleConnsPerHost = 16 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			m.InFlight()
			m.Acked()
			m.AnswerLag()
		}
	})
	body := make([]byte, 16<<10)
	var answered atomic.Int64
	for range 16 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := c.Post(srv.URL, "application/octet-stream", bytes.NewReader(body))
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("requests and the count in flight still wait 13 s after the last request was due to end: they wait for each other")
	}
	if answered.Load() == 0 {
		t.Fatal("no request was answered: the test measured nothing")
	}
}
