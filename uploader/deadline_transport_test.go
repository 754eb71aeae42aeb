package uploader_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// TestABrokenConnectionNearTheDeadlineIsNotBlamedOnTheProvidersAdvice: a
// connection that breaks after the provider stored a batch is resent
// after tilectl's own backoff; when that backoff no longer fits the run's
// deadline, the error says so (the connection, tilectl's wait), not that
// the provider asked for a wait, and the batch stays open under its key.
func TestABrokenConnectionNearTheDeadlineIsNotBlamedOnTheProvidersAdvice(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	_, hs := behindDroppedAnswers(t, p)
	c := providertest.NewClient(t, "fd")
	c.AddTiles(t, "fd", 4, 256, 1)
	u, _ := newUploader(t, hs.URL, c, nil)
	// Its backoffs (500 ms, doubling) pass the injected Sleep at once; the
	// deadline leaves a loaded machine time to claim and send the batch
	// before the fourth backoff (4 s) no longer fits.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fd"})
	if err == nil {
		t.Fatal("a run whose every answer is lost ended without an error")
	}
	msg := err.Error()
	if strings.Contains(msg, "provider asks to wait") || strings.Contains(msg, "status 0") {
		t.Errorf("error %q blames the provider's advice for tilectl's own backoff after a broken connection", msg)
	}
	if !strings.Contains(msg, "deadline") {
		t.Errorf("error %q does not say the run's deadline is what ends the resends", msg)
	}
	open, oerr := c.Store.OpenBatches(context.Background(), "fd")
	if oerr != nil || len(open) == 0 {
		t.Errorf("open batches after the run: %d (%v), want the batch kept open under its key (run error: %v)", len(open), oerr, err)
	}
}

// A 2xx whose body is cut off is a lost answer: it is resent after
// tilectl's own backoff, as a broken connection is, and when that backoff
// no longer fits the run's deadline the error does not say the provider
// asked for a wait.
func TestALostAnswerNearTheDeadlineIsNotBlamedOnTheProvidersAdvice(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"op_id":"` + b.Key + `","resu`))
	})
	c := providertest.NewClient(t, "fl")
	c.AddTiles(t, "fl", 4, 256, 1)
	u, _ := newUploader(t, hs.URL, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fl"})
	if err == nil {
		t.Fatal("a run whose every answer is cut off ended without an error")
	}
	if msg := err.Error(); strings.Contains(msg, "provider asks to wait") || !strings.Contains(msg, "deadline") {
		t.Errorf("error %q: want tilectl's own backoff past the run's deadline, not the provider's advice", msg)
	}
}
