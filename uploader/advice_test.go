package uploader_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// notBefore reads the batch's journaled not-before (nil when none) straight
// from upload_batches, whatever the batch's state.
func notBefore(t *testing.T, c *providertest.Client, opID string) *time.Time {
	t.Helper()
	var nb *time.Time
	err := c.Store.Pool().QueryRow(context.Background(), `SELECT not_before FROM upload_batches WHERE op_id = $1`, opID).Scan(&nb)
	if err != nil {
		t.Fatalf("read not_before of batch %s: %v", opID, err)
	}
	return nb
}

// asAnotherRun is c's client side as a second process sees it: the same
// database and cache, a run of its own.
func asAnotherRun(c *providertest.Client) *providertest.Client {
	return &providertest.Client{Store: c.Store.ForRun(tilestore.Run{}), Blobs: c.Blobs, URL: c.URL}
}

func TestAdvisedWaitIsKeptAcrossRuns(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		if b.Attempt == 1 {
			w.Header().Set("Retry-After", "4")
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "come back in 4 s", nil, nil)
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fw")
	c.AddTiles(t, "fw", 3, 1024, 21)

	// The first run's deadline comes before the advised time: the batch
	// stays open.
	u1, _ := newUploader(t, hs.URL, c, nil)
	ctx1, cancel1 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel1()
	rep1, err1 := u1.UploadPendingTiles(ctx1, uploader.Request{FlightID: "fw"})

	// The next run starts at once, as another process, on the real clock.
	u2, _ := newUploader(t, hs.URL, asAnotherRun(c), func(o *uploader.ClientOptions) { o.Sleep = nil })
	rep2, err2 := u2.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fw"})

	got := f.received()
	if len(got) != 2 || got[0].Key != got[1].Key {
		t.Fatalf("provider got %d requests, want the advised one and one resend under its key", len(got))
	}
	if gap := got[1].At.Sub(got[0].At); gap < 4*time.Second {
		t.Fatalf("the batch was resent %s after the provider asked for 4 s", gap.Round(time.Millisecond))
	}
	if err1 != nil || rep1.Outcome != uploader.OutcomePartial || rep1.Pending != 3 {
		t.Fatalf("first run: report %+v, err %v; want partial, 3 pending, no error (a wait is not a failure)", rep1, err1)
	}
	if rep1.NextRetryAt == nil || rep1.NextRetryAt.Before(got[0].At.Add(4*time.Second)) {
		t.Fatalf("first run: next_retry_at %v, want the advised time (>= %v)", rep1.NextRetryAt, got[0].At.Add(4*time.Second))
	}
	if err2 != nil || rep2.Accepted != 3 || rep2.Pending != 0 {
		t.Fatalf("second run: report %+v, err %v; want 3 accepted", rep2, err2)
	}
}

func TestAdviceInAnHTTPDateAndInMillisecondsIsJournaled(t *testing.T) {
	t.Parallel()
	hour := time.Hour // the longest wait a provider's advice is kept for
	cases := []struct {
		name string
		// advise writes the first answer; the second accepts.
		advise func(w http.ResponseWriter)
		// want is the advised wait from the request; none: no wait is
		// journaled and the batch goes again in the run.
		want time.Duration
		none bool
		slop time.Duration // the date's whole seconds
	}{
		{"Retry-After seconds", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "30")
			operation.WriteError(w, 503, operation.CodeUnavailable, "busy", nil, nil)
		}, 30 * time.Second, false, 0},
		{"Retry-After HTTP date", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", time.Now().Add(40*time.Second).UTC().Format(http.TimeFormat))
			operation.WriteError(w, 429, operation.CodeRateLimited, "slow down", nil, nil)
		}, 40 * time.Second, false, time.Second},
		{"retry extension in milliseconds", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(503)
			fmt.Fprint(w, `{"errors":[{"code":"UNAVAILABLE","message":"busy"}],"extensions":[{"urn":"urn:forrst:ext:retry",`+
				`"data":{"allowed":true,"after":{"value":25300,"unit":"millisecond"},"strategy":"fixed"}}]}`)
		}, 25300 * time.Millisecond, false, 0},
		{"absurd Retry-After is kept for an hour at most", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1743440400")
			operation.WriteError(w, 503, operation.CodeUnavailable, "much later", nil, nil)
		}, hour, false, 0},
		{"absurd minutes in the extension are kept for an hour at most", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(429)
			fmt.Fprint(w, `{"errors":[{"code":"RATE_LIMITED","message":"slow"}],"extensions":[{"urn":"urn:forrst:ext:retry",`+
				`"data":{"allowed":true,"after":{"value":99999999999,"unit":"minute"},"strategy":"fixed"}}]}`)
		}, hour, false, 0},
		{"HTTP date in the past", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat))
			operation.WriteError(w, 503, operation.CodeUnavailable, "busy", nil, nil)
		}, 0, true, 0},
		{"negative Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "-30")
			operation.WriteError(w, 503, operation.CodeUnavailable, "busy", nil, nil)
		}, 0, true, 0},
		{"negative extension", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(503)
			fmt.Fprint(w, `{"errors":[{"code":"UNAVAILABLE","message":"busy"}],"extensions":[{"urn":"urn:forrst:ext:retry",`+
				`"data":{"allowed":true,"after":{"value":-5,"unit":"second"},"strategy":"fixed"}}]}`)
		}, 0, true, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
				if b.Attempt == 1 {
					tc.advise(w)
					return
				}
				answerAll(w, b, "accepted")
			})
			flight := fmt.Sprintf("fj%d", i)
			c := providertest.NewClient(t, flight)
			c.AddTiles(t, flight, 2, 1024, int64(30+i))
			u, _ := newUploader(t, hs.URL, c, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: flight})
			got := f.received()
			if len(got) == 0 {
				t.Fatalf("no request reached the provider (err %v)", err)
			}
			nb := notBefore(t, c, got[0].Key)
			if tc.none {
				if nb != nil {
					t.Fatalf("not_before %v journaled for advice that asks for no wait", nb)
				}
				if err != nil || rep.Accepted != 2 {
					t.Fatalf("report %+v, err %v; want the batch resent in the run and accepted", rep, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v; a batch told to wait past the deadline is not a failure of the run", err)
			}
			if nb == nil {
				t.Fatal("no not_before journaled with the advised batch")
			}
			if d := nb.Sub(got[0].At); d < tc.want-tc.slop || d > tc.want+2*time.Second {
				t.Fatalf("not_before is %s after the request, want %s", d, tc.want)
			}
			if len(got) != 1 {
				t.Fatalf("provider got %d requests; the advised batch must not go again before its time", len(got))
			}
			if rep.NextRetryAt == nil || !rep.NextRetryAt.Equal(*nb) {
				t.Fatalf("next_retry_at = %v, want the journaled not_before %v", rep.NextRetryAt, nb)
			}
		})
	}
}

func TestOneBatchsAdviceDoesNotCutTheWaitsOfOtherBatches(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	order := map[string]int{} // key -> the order its first request came in
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		mu.Lock()
		if _, ok := order[b.Key]; !ok {
			order[b.Key] = len(order)
		}
		n := order[b.Key]
		mu.Unlock()
		switch {
		case n == 0: // past the deadline, every time
			w.Header().Set("Retry-After", "60")
			operation.WriteError(w, 503, operation.CodeUnavailable, "wait 1 minute", nil, nil)
		case n == 1 && b.Attempt == 1: // a wait within the deadline
			w.Header().Set("Retry-After", "1")
			operation.WriteError(w, 503, operation.CodeUnavailable, "wait 1 second", nil, nil)
		default:
			answerAll(w, b, "accepted")
		}
	})
	c := providertest.NewClient(t, "fc")
	c.AddTiles(t, "fc", 12, 1024, 41)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var waits []uploader.Wait
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fc", Concurrency: 3, Waiting: func(w uploader.Wait) {
		mu.Lock()
		waits = append(waits, w)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatalf("err = %v; one batch's wait past the deadline is not a failure of the run", err)
	}
	if rep.Accepted != 8 || rep.Pending != 4 {
		t.Fatalf("report %+v; want the other 8 tiles uploaded and the advised batch's 4 pending", rep)
	}
	open := openBatches(t, c, "fc")
	if len(open) != 1 || open[0].OpID != f.received()[0].Key {
		t.Fatalf("open batches %+v, want only the advised one", open)
	}
	nb := notBefore(t, c, open[0].OpID)
	if nb == nil || rep.NextRetryAt == nil || !rep.NextRetryAt.Equal(*nb) {
		t.Fatalf("next_retry_at %v, not_before %v; want both set and equal", rep.NextRetryAt, nb)
	}
	// Each wait was announced as it started: the one the run waits for,
	// and the one it leaves for a later run, with what and until when.
	mu.Lock()
	defer mu.Unlock()
	var in, past int
	for _, w := range waits {
		switch {
		case w.Reason != uploader.WaitProviderAdvice || w.Tiles != 4 || w.Until.IsZero():
			t.Errorf("wait %+v, want the provider's advice for a batch of 4 tiles, with its end", w)
		case w.PastDeadline && w.Until.Equal(*nb):
			past++
		case !w.PastDeadline:
			in++
		}
	}
	if in != 1 || past != 1 {
		t.Errorf("announced waits %+v; want one waited for in the run and one past the deadline at not_before", waits)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the run waited for its deadline instead of ending when only the advised batch was left")
	}
}

func TestAdviceBeyondTheCapWaitsApartWithinTheDeadline(t *testing.T) {
	t.Parallel()
	first := &firstKey{}
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		advised := first.is(b.Key) && b.Attempt == 1
		if advised {
			w.Header().Set("Retry-After", "2")
			operation.WriteError(w, 429, operation.CodeRateLimited, "2 s, please", nil, nil)
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fk")
	c.AddTiles(t, "fk", 12, 1024, 51)
	// A 1 s cap on one wait in an exchange: the 2 s advice does not fit it,
	// but fits the deadline.
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep, o.MaxRetryDelay = nil, time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fk", Concurrency: 1})
	if err != nil || rep.Accepted != 12 || rep.Pending != 0 || rep.NextRetryAt != nil {
		t.Fatalf("report %+v, err %v; want all 12 accepted in the run", rep, err)
	}
	got := f.received()
	var advisedAt, resentAt, lastOther time.Time
	for _, b := range got {
		switch {
		case first.is(b.Key) && b.Attempt == 1:
			advisedAt = b.At
		case first.is(b.Key):
			resentAt = b.At
		default:
			lastOther = b.At
		}
	}
	if resentAt.Sub(advisedAt) < 2*time.Second {
		t.Fatalf("the advised batch went again %s after the advice, want >= 2s", resentAt.Sub(advisedAt))
	}
	if !lastOther.Before(resentAt) {
		t.Fatal("the other batches waited for the advised one: claims of other tiles must go on meanwhile")
	}
}

func TestAdviceOnTheLastResendWaitsApartInsteadOfFailingTheRun(t *testing.T) {
	t.Parallel()
	const resends = 2
	var mu sync.Mutex
	order := map[string]int{} // key -> the order its first request came in
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		mu.Lock()
		if _, ok := order[b.Key]; !ok {
			order[b.Key] = len(order)
		}
		n := order[b.Key]
		mu.Unlock()
		switch {
		case n == 0 && b.Attempt <= resends+1: // every attempt of one exchange is told to wait
			w.Header().Set("Retry-After", "1")
			operation.WriteError(w, 503, operation.CodeUnavailable, "wait 1 second", nil, nil)
		case n == 1 && b.Attempt == 1: // another batch's wait, within the deadline
			w.Header().Set("Retry-After", "2")
			operation.WriteError(w, 503, operation.CodeUnavailable, "wait 2 seconds", nil, nil)
		default:
			answerAll(w, b, "accepted")
		}
	})
	c := providertest.NewClient(t, "fr")
	c.AddTiles(t, "fr", 12, 1024, 61)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep, o.MaxResends = nil, resends })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fr", Concurrency: 3})
	if err != nil {
		t.Fatalf("err = %v; a batch still told to wait when its resends run out waits apart, it does not fail the run", err)
	}
	if rep.Accepted != 12 || rep.Pending != 0 || rep.NextRetryAt != nil {
		t.Fatalf("report %+v; want all 12 tiles uploaded in the run, the other batch's wait kept", rep)
	}
	if got := c.Counts(t, "fr")[tilestore.StatusUploaded]; got != 12 {
		t.Fatalf("uploaded = %d, want 12", got)
	}
}

func TestADueBatchCutOffByTheDeadlineStaysOpenWithoutFailingTheRun(t *testing.T) {
	t.Parallel()
	first := &firstKey{}
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		advised := first.is(b.Key)
		switch {
		case advised && b.Attempt == 1:
			w.Header().Set("Retry-After", "1")
			operation.WriteError(w, 503, operation.CodeUnavailable, "wait 1 second", nil, nil)
		case advised: // its resend gets no answer before the run's deadline
			select {
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
		default:
			answerAll(w, b, "accepted")
		}
	})
	c := providertest.NewClient(t, "fd")
	c.AddTiles(t, "fd", 12, 1024, 62)
	// A cap on one wait below the advice: the batch waits apart (due),
	// not in its worker's exchange.
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Sleep, o.MaxRetryDelay = nil, 500*time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fd", Concurrency: 3})
	if err != nil {
		t.Fatalf("err = %v; a batch the deadline cuts off on the wire stays open, it does not fail the run", err)
	}
	if rep.Accepted != 8 || rep.Pending != 4 {
		t.Fatalf("report %+v; want the other 8 tiles uploaded and the cut-off batch's 4 pending", rep)
	}
	if open := openBatches(t, c, "fd"); len(open) != 1 || open[0].OpID != first.get() {
		t.Fatalf("open batches %+v, want the cut-off batch %s", open, first.get())
	}
}

// failingOpenStore fails OpenBatches, which only a batch waiting for its
// advised time reads, and records when.
type failingOpenStore struct {
	uploader.Store
	mu     sync.Mutex
	failed time.Time
}

var errOpenBatchesDown = errors.New("open batches: the database went away")

func (s *failingOpenStore) OpenBatches(context.Context, string) ([]tilestore.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed.IsZero() {
		s.failed = time.Now()
	}
	return nil, errOpenBatchesDown
}

func TestAFailureOfADueBatchStopsTheRunPromptly(t *testing.T) {
	t.Parallel()
	first := &firstKey{}
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		advised := first.is(b.Key)
		if advised {
			w.Header().Set("Retry-After", "1")
			operation.WriteError(w, 503, operation.CodeUnavailable, "wait 1 second", nil, nil)
			return
		}
		time.Sleep(100 * time.Millisecond) // a slow link: the workers have seconds of work left
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fp")
	c.AddTiles(t, "fp", 160, 256, 63)
	store := &failingOpenStore{Store: c.Store}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep, o.MaxRetryDelay, o.Store = nil, 500*time.Millisecond, store
	})
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fp", Concurrency: 1})
	if !errors.Is(err, errOpenBatchesDown) {
		t.Fatalf("err = %v; want the due batch's failure", err)
	}
	store.mu.Lock()
	failed := store.failed
	store.mu.Unlock()
	late := 0
	for _, b := range f.received() {
		if b.Attempt == 1 && b.At.After(failed.Add(time.Second)) {
			late++
		}
	}
	if late > 0 {
		t.Fatalf("%d new batches went out more than 1s after the due batch failed; a run-level failure stops claiming at once", late)
	}
}

// firstKey remembers the first batch key it is asked about: the batch a
// test singles out. It is safe for concurrent use.
type firstKey struct {
	mu  sync.Mutex
	key string
}

// is reports whether key is the first key asked about.
func (f *firstKey) is(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.key == "" {
		f.key = key
	}
	return key == f.key
}

// get is the first key asked about ("" before any).
func (f *firstKey) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.key
}
