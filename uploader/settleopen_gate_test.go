package uploader_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// An open batch an earlier run left, resent by the call that adopts it,
// takes a slot of the call's limit on batches in flight as a batch back
// from an advised wait does: with Concurrency 1, a waiting batch that
// comes due while the adopted one is on the wire waits for its slot.
//
// Run 1 leaves batch A waiting on a 1 s Retry-After and batch B open
// after no answer; run 2 resends B at once, and B's answer is held until
// A's resend arrives (which it must not) or 3 s pass, well after A's time.
func TestAnAdoptedOpenBatchTakesASlotBesideABatchComingDue(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		role  = map[string]string{}
		aBack = make(chan struct{})
		run2  atomic.Bool
		now   atomic.Int32
		top   atomic.Int32
	)
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		mu.Lock()
		if _, ok := role[b.Key]; !ok {
			role[b.Key] = map[bool]string{true: "A", false: "B"}[len(role) == 0]
		}
		ro := role[b.Key]
		mu.Unlock()
		if run2.Load() {
			n := now.Add(1)
			defer now.Add(-1)
			for {
				tp := top.Load()
				if n <= tp || top.CompareAndSwap(tp, n) {
					break
				}
			}
		}
		switch {
		case b.Attempt == 1 && ro == "A":
			w.Header().Set("Retry-After", "1")
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "busy", nil, nil)
			return
		case b.Attempt == 1 && ro == "B":
			<-r.Context().Done() // no answer: run 1 leaves it open
			return
		case ro == "A":
			close(aBack)
		case ro == "B":
			select {
			case <-aBack:
			case <-time.After(3 * time.Second):
			}
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fg")
	c.AddTiles(t, "fg", 2, 256, 31)
	u1, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.RequestTimeout = 10 * time.Second })
	ctx1, cancel1 := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel1()
	if rep, err := u1.UploadPendingTiles(ctx1, uploader.Request{FlightID: "fg", BatchSize: 1, Concurrency: 2}); err == nil || rep.Pending != 2 || len(rep.Waiting) != 1 {
		t.Fatalf("run 1: report %+v, %v: want both tiles pending, one batch waiting and one left open", rep, err)
	}

	run2.Store(true)
	u2, _ := newUploader(t, hs.URL, asAnotherRun(c), func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep
		o.RequestTimeout = 10 * time.Second
	})
	rep, err := u2.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fg", BatchSize: 1, Concurrency: 1})
	if err != nil || rep.Uploaded() != 2 || rep.Pending != 0 {
		t.Fatalf("run 2: report %+v, %v: want both tiles uploaded", rep, err)
	}
	if got := len(f.received()); got != 4 {
		t.Errorf("%d batch requests, want 4 (each batch twice)", got)
	}
	if n := top.Load(); n != 1 {
		t.Errorf("run 2 (Concurrency 1) had %d batches in flight at once, want 1", n)
	}
}
