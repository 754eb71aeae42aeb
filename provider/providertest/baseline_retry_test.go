package providertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// The contract-following baseline resends a batch under its key only after
// the wait its answer advised, and gives its worker to the other batches
// meanwhile; a batch whose answer was lost goes again at once, under its
// key, and the provider's replay settles it.
func TestBaselineUploadRetryingWaitsWhatTheAnswerSaysAndNoMore(t *testing.T) {
	const after = 200 * time.Millisecond
	sink := StartSink(t)
	hs, sent := recordingServer(t, sink, func(w http.ResponseWriter, r *http.Request, n int) bool {
		switch n {
		case 1: // the first batch is told to come back later
			operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: after, Strategy: operation.StrategyFixed}, nil)
			return true
		case 2: // the second is stored, and its answer lost
			sink.ServeHTTP(httptest.NewRecorder(), r)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return true
		}
		return false
	})
	c := NewClient(t, "fb")
	tiles := c.AddTiles(t, "fb", 2, 512, 3)
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

	err := BaselineUploadRetrying(context.Background(), client, hs.URL, Token, "fb", c.Blobs,
		[][]tilestore.Tile{tiles[:1], tiles[1:]}, 1)
	if err != nil {
		t.Fatalf("baseline: %v", err)
	}
	if got := sink.Tiles.Load(); got != 2 {
		t.Errorf("sink stored %d tiles, want 2", got)
	}
	sends := sent()
	if len(sends) != 4 {
		t.Fatalf("%d sends, want 4", len(sends))
	}
	first, lost, again, last := sends[0], sends[1], sends[2], sends[3]
	if lost.key == first.key || again.key != lost.key || last.key != first.key {
		t.Fatalf("sends %v: want the advised batch, the other one twice (its answer lost), then the advised one again", sends)
	}
	if d := last.at.Sub(first.at); d < after {
		t.Errorf("the advised batch went again after %v, before its %v", d, after)
	}
	if d := again.at.Sub(lost.at); d >= after {
		t.Errorf("a lost answer's batch went again after %v; the contract sets no wait", d)
	}
}

// recordingServer answers the baseline's batches with answer(n), n
// counting its batch requests from 1, and serves the rest from sink; it
// returns the batch requests' keys and times in the order they came.
func recordingServer(t *testing.T, sink *Sink, answer func(w http.ResponseWriter, r *http.Request, n int) bool) (*httptest.Server, func() []sentBatch) {
	var mu sync.Mutex
	var sent []sentBatch
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			sink.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		sent = append(sent, sentBatch{r.Header.Get(operation.HeaderIdempotencyKey), time.Now()})
		n := len(sent)
		mu.Unlock()
		if !answer(w, r, n) {
			sink.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	return hs, func() []sentBatch { mu.Lock(); defer mu.Unlock(); return slices.Clone(sent) }
}

// sentBatch is one batch request recordingServer saw.
type sentBatch struct {
	key string
	at  time.Time
}

// A batch whose wait is over goes before the batches not sent yet.
func TestBaselineUploadRetryingSendsADueBatchBeforeTheUnsentOnes(t *testing.T) {
	hs, sent := recordingServer(t, StartSink(t), func(w http.ResponseWriter, r *http.Request, n int) bool {
		switch n {
		case 1:
			operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: 100 * time.Millisecond, Strategy: operation.StrategyFixed}, nil)
			return true
		case 2:
			time.Sleep(400 * time.Millisecond) // the first batch's wait ends meanwhile
		}
		return false
	})
	c := NewClient(t, "fo")
	tiles := c.AddTiles(t, "fo", 3, 256, 4)
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	if err := BaselineUploadRetrying(context.Background(), client, hs.URL, Token, "fo", c.Blobs,
		[][]tilestore.Tile{tiles[:1], tiles[1:2], tiles[2:]}, 1); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	got := sent()
	if len(got) != 4 || got[2].key != got[0].key || got[3].key == got[0].key || got[3].key == got[1].key {
		t.Fatalf("keys %v: want the advised batch, the second, the advised one again, then the third", got)
	}
}

// A fatal answer ends the upload at once: it does not wait out a batch's
// pending wait.
func TestBaselineUploadRetryingEndsAtAFatalAnswerWithoutWaitingOutTheWaits(t *testing.T) {
	hs, _ := recordingServer(t, StartSink(t), func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n == 1 {
			operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: 5 * time.Second, Strategy: operation.StrategyFixed}, nil)
		} else {
			operation.WriteError(w, http.StatusForbidden, operation.CodeForbidden, "no", nil, nil)
		}
		return true
	})
	c := NewClient(t, "fe")
	tiles := c.AddTiles(t, "fe", 2, 256, 5)
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	start := time.Now()
	err := BaselineUploadRetrying(context.Background(), client, hs.URL, Token, "fe", c.Blobs,
		[][]tilestore.Tile{tiles[:1], tiles[1:]}, 1)
	if err == nil {
		t.Fatal("baseline: nil error, want the 403")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("ended %v after the start, having waited out the other batch's 5s wait", d)
	}
}

// A provider that refuses connections is not hammered: the baseline backs
// off and gives up.
func TestBaselineUploadRetryingBacksOffAndGivesUpWhenNothingAnswers(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close() // connections are refused from now on
	c := NewClient(t, "fn")
	tiles := c.AddTiles(t, "fn", 1, 256, 6)
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	start := time.Now()
	err := BaselineUploadRetrying(context.Background(), client, url, Token, "fn", c.Blobs, [][]tilestore.Tile{tiles}, 1)
	if err == nil {
		t.Fatal("baseline: nil error, want it to give up")
	}
	if d := time.Since(start); d < time.Second || d > 10*time.Second {
		t.Errorf("gave up after %v; want a backoff (at least 1s in all) and an end", d)
	}
}

// An exponential strategy without "after" starts from 1 s, as tilectl's.
func TestBaselineWaitStartsAnExponentialWithoutAfterFromOneSecond(t *testing.T) {
	rec := httptest.NewRecorder()
	operation.WriteError(rec, http.StatusUnprocessableEntity, operation.CodeInvalidRequest, "again",
		&operation.RetryExtension{Allowed: true, Strategy: operation.StrategyExponential}, nil)
	for sends, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second} {
		if got, again := baselineWait(rec.Code, rec.Header(), rec.Body.Bytes(), sends, time.Now()); !again || got != want {
			t.Errorf("after send %d: wait %v (again %v), want %v", sends, got, again, want)
		}
	}
}
