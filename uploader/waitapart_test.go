package uploader_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// A batch answered 409 IDEMPOTENCY_PROCESSING with the advice to come back
// in 300 ms waits for it apart, as a throttled one does: with one worker,
// the next batch goes meanwhile, and the first goes again after it, under
// its key, once the advised time has come.
func TestABatchAdvisedToWaitHoldsNoWorkerWhileItWaits(t *testing.T) {
	t.Parallel()
	const after = 300 * time.Millisecond
	var advised atomic.Bool
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if b.Attempt == 1 && advised.CompareAndSwap(false, true) {
			operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: after, Strategy: operation.StrategyFixed}, nil)
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fw")
	c.AddTiles(t, "fw", 2, 256, 6)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = operation.Sleep })

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fw", BatchSize: 1, Concurrency: 1})
	if err != nil || rep.Uploaded() != 2 {
		t.Fatalf("report %+v, %v: want both tiles uploaded", rep, err)
	}
	got := f.received()
	if len(got) != 3 {
		t.Fatalf("%d batch requests, want 3 (the advised one twice)", len(got))
	}
	first, other, again := got[0], got[1], got[2]
	if other.Key == first.Key || again.Key != first.Key {
		t.Fatalf("requests %s, %s, %s: want the other batch between the advised one's two sends", first.Key, other.Key, again.Key)
	}
	if d := again.At.Sub(first.At); d < after {
		t.Errorf("resent %v after the 409, before the advised %v", d, after)
	}
}

// A batch whose answer was lost (the connection closed after the provider
// read it) is resent under its key at once: the contract sets no wait
// before that resend, and the provider replays what it stored.
func TestALostAnswerIsResentAtOnce(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if b.Attempt == 1 {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fl")
	c.AddTiles(t, "fl", 2, 256, 7)
	u, sl := newUploader(t, hs.URL, c, nil)

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fl"})
	if err != nil || rep.Uploaded() != 2 || rep.Resends != 1 {
		t.Fatalf("report %+v, %v: want both tiles uploaded after one resend", rep, err)
	}
	if got := f.received(); len(got) != 2 || got[1].Key != got[0].Key {
		t.Fatalf("%d batch requests: want the batch twice under one key", len(got))
	}
	for _, d := range sl.all() {
		if d > 0 {
			t.Errorf("waited %v before resending a batch whose answer was lost; want no wait (waits %v)", d, sl.all())
		}
	}
}

// A batch whose answer did not come in time is not resent at once: a
// provider too slow to answer is loaded, and every batch in flight may
// have timed out with it. Its resend waits tilectl's backoff.
func TestATimedOutBatchBacksOffBeforeItsResend(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		if b.Attempt == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "ft")
	c.AddTiles(t, "ft", 2, 256, 8)
	u, sl := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.RequestTimeout = 300 * time.Millisecond })

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "ft"})
	if err != nil || rep.Uploaded() != 2 || rep.Resends != 1 {
		t.Fatalf("report %+v, %v: want both tiles uploaded after one resend", rep, err)
	}
	if got := f.received(); len(got) != 2 || got[1].Key != got[0].Key {
		t.Fatalf("%d batch requests: want the batch twice under one key", len(got))
	}
	var waited time.Duration
	for _, d := range sl.all() {
		waited += d
	}
	if waited < 500*time.Millisecond {
		t.Errorf("waited %v in all before resending a batch that timed out (waits %v); want tilectl's backoff, at least 500ms", waited, sl.all())
	}
}

// The provider's limit on attempts (the retry extension's max_attempts,
// or the contract table's 3 for 500 INTERNAL_ERROR) counts every send of
// the batch in the run, also when it waits apart for the advised time
// between them: it gets exactly the allowed sends, and the run ends with
// the provider's error.
func TestTheAttemptLimitHoldsAcrossWaitsApart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		code   string
		max    int
		want   int
	}{
		{"500 max_attempts 2", http.StatusInternalServerError, operation.CodeInternalError, 2, 2},
		{"500 table limit", http.StatusInternalServerError, operation.CodeInternalError, 0, 3},
		{"503 max_attempts 2", http.StatusServiceUnavailable, operation.CodeUnavailable, 2, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
				operation.WriteError(w, tc.status, tc.code, "failing",
					&operation.RetryExtension{Allowed: true, After: 50 * time.Millisecond, Strategy: operation.StrategyFixed, MaxAttempts: tc.max}, nil)
			})
			c := providertest.NewClient(t, "fm")
			c.AddTiles(t, "fm", 1, 256, 9)
			u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = operation.Sleep })

			_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fm", BatchSize: 1, Concurrency: 1})
			var perr *uploader.ProviderError
			if !errors.As(err, &perr) || perr.Status != tc.status {
				t.Errorf("err = %v; want the provider's %d", err, tc.status)
			}
			if got := f.received(); len(got) != tc.want {
				t.Fatalf("%d batch requests, want %d", len(got), tc.want)
			}
		})
	}
}

// openBatchesCount counts the reads of the journal's open batches.
type openBatchesCount struct {
	uploader.Store
	n atomic.Int64
}

func (s *openBatchesCount) OpenBatches(ctx context.Context, flightID string) ([]tilestore.Batch, error) {
	s.n.Add(1)
	return s.Store.OpenBatches(ctx, flightID)
}

// The advised time is the database's: a batch that waits apart reads the
// journal again only once its wait has passed on the real clock, also
// when the uploader's Sleep returns early (a fake one returns at once),
// so it never spins against the database while it waits.
func TestAWaitingBatchDoesNotSpinOnTheJournalWhenSleepReturnsEarly(t *testing.T) {
	t.Parallel()
	const after = 300 * time.Millisecond
	var advised atomic.Bool
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if advised.CompareAndSwap(false, true) {
			operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: after, Strategy: operation.StrategyFixed}, nil)
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fs")
	c.AddTiles(t, "fs", 1, 256, 10)
	st := &openBatchesCount{Store: c.Store}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Store = st }) // its Sleep returns at once

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fs", BatchSize: 1, Concurrency: 1})
	if err != nil || rep.Uploaded() != 1 {
		t.Fatalf("report %+v, %v: want the tile uploaded", rep, err)
	}
	if got := f.received(); len(got) != 2 {
		t.Fatalf("%d batch requests, want 2 (the advised one twice)", len(got))
	}
	if n := st.n.Load(); n > 6 {
		t.Errorf("%d reads of the open batches for one wait of %v; want a few, not one per early return of Sleep", n, after)
	}
}

// emptyBudgetRun uploads a flight of one tile, with the run's retry budget
// empty, through a provider that answers its batch requests with answers
// in turn, then accepts.
func emptyBudgetRun(t *testing.T, flight string, answers ...func(http.ResponseWriter)) (*fakeProvider, string, *providertest.Client, uploader.Report, error) {
	t.Helper()
	var n atomic.Int32
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if i := int(n.Add(1)) - 1; i < len(answers) {
			answers[i](w)
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, 1, 256, 9)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep
		o.ResendBudget, o.ResendRatio = -1, -1 // an empty budget
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: flight})
	return f, hs.URL, c, rep, err
}

// The provider's answers the tests below are made of.
var (
	processing50ms = func(w http.ResponseWriter) {
		operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
			&operation.RetryExtension{Allowed: true, After: 50 * time.Millisecond, Strategy: operation.StrategyFixed}, nil)
	}
	throttledFor1s = func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "1")
		operation.WriteError(w, http.StatusTooManyRequests, operation.CodeRateLimited, "slow down", nil, nil)
	}
	unavailable = func(w http.ResponseWriter) {
		operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "down", nil, nil)
	}
)

// A batch back from its wait apart whose next resend needs the run's retry
// budget (the resend after a 409 poll's wait, or tilectl's own after a
// throttle's wait when the provider's next answer names no wait) is left
// open for the next run when the budget refuses it, as any batch whose
// resend the budget refuses is: the run does not fail, the refusal is
// counted, and its key goes again in a later run.
func TestAWaitingBatchWhoseResendTheBudgetRefusesIsLeftOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		flight  string
		answers []func(http.ResponseWriter)
		sent    int // batch requests of the first run
	}{
		{"the resend after a 409 poll's wait", "fb", []func(http.ResponseWriter){processing50ms}, 1},
		{"its own resend after a throttle's wait", "fo", []func(http.ResponseWriter){throttledFor1s, unavailable}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, url, c, rep, err := emptyBudgetRun(t, tc.flight, tc.answers...)
			if err != nil {
				t.Fatalf("a batch whose resend the budget refused: the run failed: %v (report %+v)", err, rep)
			}
			if rep.Pending != 1 || rep.ResendsRefused != 1 {
				t.Fatalf("report %+v: want the batch left open (1 pending) and the refusal counted", rep)
			}
			if got := f.received(); len(got) != tc.sent {
				t.Fatalf("%d batch requests, want %d: the budget refused the resend", len(got), tc.sent)
			}
			u2, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) { o.Sleep = operation.Sleep })
			rep, err = u2.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: tc.flight})
			if err != nil || rep.Pending != 0 {
				t.Fatalf("next run: report %+v, %v: want the batch settled", rep, err)
			}
			if got := f.received(); len(got) != tc.sent+1 || got[tc.sent].Key != got[0].Key {
				t.Fatalf("%d batch requests: want the batch again under its key in the next run", len(got))
			}
		})
	}
}

// A batch that waited apart after a throttle (429) named a wait of a
// second goes again when it is due with the run's retry budget empty: the
// provider set the pace, and the budget bounds the other resends.
func TestAWaitingBatchGoesAgainWhenDueWithTheRetryBudgetEmpty(t *testing.T) {
	t.Parallel()
	f, _, _, rep, err := emptyBudgetRun(t, "fg", throttledFor1s)
	if err != nil || rep.Pending != 0 || rep.ResendsRefused != 0 {
		t.Fatalf("report %+v, %v: want the batch settled in this run and no resend refused", rep, err)
	}
	if got := f.received(); len(got) != 2 || got[1].Key != got[0].Key {
		t.Fatalf("%d batch requests, want 2 under one key: the first, and the one the provider asked for", len(got))
	}
}

// Batches back from an advised wait count against the limit on batches in
// flight that the workers' batches take their slots from: with a fixed
// limit, the provider never has more batches of the run at once than it,
// however many of them come due while the workers send new ones.
//
// Every first send is held on the wire until a batch comes back from its
// wait, or for 300 ms, ten times the 30 ms wait: a batch that came due
// outside the limit would be on the wire beside the held ones, which fill
// it. The wait is named by the retry extension alone, so it is 30 ms and
// not Retry-After's whole second.
func TestBatchesBackFromAnAdvisedWaitKeepToTheLimitOnBatchesInFlight(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			t.Parallel()
			var now, top atomic.Int32
			back := make(chan struct{})
			var backOnce sync.Once
			f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
				n := now.Add(1)
				defer now.Add(-1)
				for {
					t := top.Load()
					if n <= t || top.CompareAndSwap(t, n) {
						break
					}
				}
				if b.Attempt == 1 {
					select {
					case <-back:
					case <-time.After(300 * time.Millisecond):
					}
					writeExtensionAlone(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
						&operation.RetryExtension{Allowed: true, After: 30 * time.Millisecond, Strategy: operation.StrategyFixed})
					return
				}
				backOnce.Do(func() { close(back) })
				answerAll(w, b, "accepted")
			})
			c := providertest.NewClient(t, "fc")
			c.AddTiles(t, "fc", 12, 256, 11)
			u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = operation.Sleep })

			rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fc", BatchSize: 1, Concurrency: limit})
			if err != nil || rep.Uploaded() != 12 {
				t.Fatalf("report %+v, %v: want all 12 tiles uploaded", rep, err)
			}
			if got := len(f.received()); got != 24 {
				t.Errorf("%d batch requests, want 24 (each batch advised to wait once)", got)
			}
			if n := top.Load(); n > int32(limit) {
				t.Errorf("most batches in flight at once = %d, want at most the limit %d", n, limit)
			}
		})
	}
}

// A retry extension with strategy exponential backs off from its "after"
// across the batch's waits apart, as within one exchange: each wait the
// batch journals and waits apart is twice the one before, never the bare
// "after" again.
func TestAnExponentialAdviceBacksOffAcrossWaitsApart(t *testing.T) {
	t.Parallel()
	const after = 25 * time.Millisecond
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if b.Attempt <= 3 {
			// The extension alone names the wait: no Retry-After, whose
			// whole seconds would be the floor of every wait.
			writeExtensionAlone(w, http.StatusBadGateway, operation.CodeDependencyError, "storage is slow",
				&operation.RetryExtension{Allowed: true, After: after, Strategy: operation.StrategyExponential})
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fx")
	c.AddTiles(t, "fx", 1, 256, 12)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = operation.Sleep })

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fx", BatchSize: 1, Concurrency: 1})
	if err != nil || rep.Uploaded() != 1 {
		t.Fatalf("report %+v, %v: want the tile uploaded", rep, err)
	}
	got := f.received()
	if len(got) != 4 {
		t.Fatalf("%d batch requests, want 4", len(got))
	}
	for i := 1; i < len(got); i++ {
		want := after << (i - 1)
		if d := got[i].At.Sub(got[i-1].At); d < want {
			t.Errorf("send %d went %v after send %d; want at least %v (exponential from %v)", i+1, d, i, want, after)
		}
	}
}

// The bound on a batch's resends (MaxResends) counts the resends tilectl
// decided on its own across the batch's waits apart, and only those: a
// batch answered 504 (one resend of its own), then advised to wait apart,
// then 504 again gets MaxResends 2 resends of its own in all, not 2 more
// after its wait, and its advised send spends none; the run then ends
// with the provider's error, the batch left open for the next call to
// resend under its key.
func TestTheResendBoundCountsOwnResendsAcrossAWaitApart(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if b.Attempt == 2 {
			writeExtensionAlone(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: 20 * time.Millisecond, Strategy: operation.StrategyFixed})
			return
		}
		operation.WriteError(w, http.StatusGatewayTimeout, operation.CodeDeadlineExceeded, "storage timed out", nil, nil)
	})
	c := providertest.NewClient(t, "fr")
	c.AddTiles(t, "fr", 1, 256, 13)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep
		o.MaxResends = 2
	})

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fr", BatchSize: 1, Concurrency: 1})
	var perr *uploader.ProviderError
	if !errors.As(err, &perr) || perr.Status != http.StatusGatewayTimeout || rep.Pending != 1 {
		t.Fatalf("report %+v, %v: want the provider's 504 and the batch left open", rep, err)
	}
	// The first send, its own resend, the advised send, one more own resend.
	if got := f.received(); len(got) != 4 {
		t.Fatalf("%d batch requests, want 4 (the first send, 2 resends of its own and the advised one)", len(got))
	}
}

// tilectl's own backoff after no answer counts on across a wait apart
// from the resends it decided on its own, not from the sends the provider
// asked for: a batch that timed out once (a first resend's backoff,
// 500 ms), then polled 409 twice, each an advised wait apart, and then
// timed out again waits as its second own resend's backoff (1 s), neither
// a first's again nor a fourth's.
func TestTheTransportBackoffCountsOwnResendsAcrossAWaitApart(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		switch b.Attempt {
		case 1, 4:
			<-r.Context().Done() // no answer in time
		case 2, 3:
			writeExtensionAlone(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: 20 * time.Millisecond, Strategy: operation.StrategyFixed})
		default:
			answerAll(w, b, "accepted")
		}
	})
	c := providertest.NewClient(t, "fo")
	c.AddTiles(t, "fo", 1, 256, 14)
	u, sl := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.RequestTimeout = 1500 * time.Millisecond })

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fo", BatchSize: 1, Concurrency: 1})
	if err != nil || rep.Uploaded() != 1 {
		t.Fatalf("report %+v, %v: want the tile uploaded", rep, err)
	}
	if got := f.received(); len(got) != 5 {
		t.Fatalf("%d batch requests, want 5", len(got))
	}
	// The waits: the first timeout's backoff, the two advised ones, then
	// the second timeout's backoff.
	waits := sl.all()
	if len(waits) == 0 || waits[0] != 500*time.Millisecond || waits[len(waits)-1] != time.Second {
		t.Errorf("waits %v: want the first timeout's backoff, 500ms, first and the second's, 1s, last", waits)
	}
}

// writeExtensionAlone writes operation.WriteError's answer without its
// Retry-After header: the retry extension alone names the wait, whose
// milliseconds are then the wait, not a whole second.
func writeExtensionAlone(w http.ResponseWriter, status int, code, msg string, ext *operation.RetryExtension) {
	rec := httptest.NewRecorder()
	operation.WriteError(rec, status, code, msg, ext, nil)
	w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// MaxResends bounds the resends tilectl decides on its own, after answers
// that name no wait: the sends the provider asked for by naming a wait do
// not spend it (its max_attempts, the table and the deadline bound them).
// A batch that polled 409 IDEMPOTENCY_PROCESSING five times, each an
// advised wait apart, and is then answered 504 is resent, and the run
// completes.
func TestAdvisedPollsDoNotSpendTheResendBound(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		switch {
		case b.Attempt <= 5:
			writeExtensionAlone(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: 10 * time.Millisecond, Strategy: operation.StrategyFixed})
		case b.Attempt == 6:
			operation.WriteError(w, http.StatusGatewayTimeout, operation.CodeDeadlineExceeded, "storage timed out", nil, nil)
		default:
			answerAll(w, b, "accepted")
		}
	})
	c := providertest.NewClient(t, "fp")
	c.AddTiles(t, "fp", 1, 256, 15)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep
		o.MaxResends = 5
	})

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fp", BatchSize: 1, Concurrency: 1})
	if err != nil || rep.Uploaded() != 1 || rep.Pending != 0 {
		t.Fatalf("report %+v, %v: want the 504 resent and the tile uploaded", rep, err)
	}
	if got := len(f.received()); got != 7 {
		t.Errorf("%d batch requests, want 7 (5 advised polls, the 504, its resend)", got)
	}
}
