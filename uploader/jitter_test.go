package uploader_test

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// transportWaits uploads one batch to a provider that breaks the
// connection on the first five attempts, with decorrelated jitter drawn
// from a source seeded with seed, and returns the waits before resends:
// none before the first (TestALostAnswerIsResentAtOnce), then the backoff.
func transportWaits(t *testing.T, seed uint64) []time.Duration {
	t.Helper()
	_, hs := newFake(t, func(w http.ResponseWriter, _ *http.Request, b fakeBatch) {
		if b.Attempt <= 5 {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		answerAll(w, b, "accepted")
	})
	c := providertest.NewClient(t, "fj")
	c.AddTiles(t, "fj", 2, 256, 5)
	u, sl := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Jitter, o.Rand = operation.JitterDecorrelated, rand.New(rand.NewPCG(seed, 0))
		o.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		o.Breaker.FailureThreshold = -1 // five failures in a row would open it
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fj"})
	if err != nil || rep.Uploaded() != 2 || rep.Resends != 5 {
		t.Fatalf("report %+v, %v: want both tiles uploaded after 5 resends", rep, err)
	}
	return sl.all()
}

func TestTransportResendWaitsUseDecorrelatedJitterFromTheInjectedSource(t *testing.T) {
	t.Parallel()
	a := transportWaits(t, 42)
	if len(a) != 5 || a[0] != 0 {
		t.Fatalf("waits %v, want 5: none before the first resend, then four backing off", a)
	}
	prev := time.Duration(0)
	exponential := true
	for i, d := range a[1:] {
		hi := max(500*time.Millisecond, 3*prev)
		if d < 500*time.Millisecond || d > min(hi, 30*time.Second) {
			t.Errorf("wait %d = %v, outside decorrelated [500ms, %v]", i+2, d, hi)
		}
		exponential = exponential && d == 500*time.Millisecond<<(i+1)
		prev = d
	}
	if exponential {
		t.Errorf("waits %v are the plain exponential: no jitter applied", a)
	}
	if b := transportWaits(t, 42); len(b) != len(a) || b[0] != a[0] || b[4] != a[4] {
		t.Errorf("same seed, different waits: %v vs %v", a, b)
	}
}
