package uploader_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// TestAThrottlingProviderIsUsedToItsRateWithFewRefusals runs an upload at
// default settings, with the real clock, against a provider on loopback
// that admits 20 batches a second and answers 429 with Retry-After: 1
// beyond that: at most one batch send in ten is refused, and the run keeps
// to at least three quarters of that rate (make bench measures the target
// of 0.9, through the link emulator and on loopback; a unit test shares
// its machine, and this floor is what a storm of refusals or a run stalled
// by them falls under).
func TestAThrottlingProviderIsUsedToItsRateWithFewRefusals(t *testing.T) {
	t.Parallel()
	const batches, perBatch = 300, 2
	p := providertest.Start(t, nil)
	const burst = 5
	tb := providertest.NewThrottle(p.Server.Handler(), 20, burst)
	hs := httptest.NewServer(tb)
	t.Cleanup(hs.Close)
	c := providertest.NewClient(t, "fthr")
	c.AddTiles(t, "fthr", batches*perBatch, 256, 1)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.Sleep = operation.Sleep // the real clock: pacing is what is measured; the retry budget at its default
	})

	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fthr", BatchSize: perBatch})
	if err != nil || rep.Accepted != batches*perBatch {
		t.Fatalf("UploadPendingTiles: accepted %d, err %v; want %d accepted", rep.Accepted, err, batches*perBatch)
	}
	allUploadedOnce(t, c, p, "fthr", batches*perBatch)

	st := tb.Stats()
	admitted, span, refused := st.Admitted, st.End.Sub(st.First), st.Refused
	// The bucket's burst is spent once; after it, the rate it allows.
	rate := float64(admitted-burst) / span.Seconds()
	share := float64(refused) / float64(admitted+refused)
	t.Logf("throttle: %d batches admitted in %s: %.1f batches/s of 20 allowed (%.2f); %d refused with 429, %.1f%% of %d sends; limit at the end %d",
		admitted, span.Round(time.Millisecond), rate, rate/20, refused, 100*share, admitted+refused, rep.Concurrency)
	if rate < 0.75*20 {
		t.Errorf("%.1f batches/s against a provider that allows 20, want at least 15", rate)
	}
	if share > 0.10 {
		t.Errorf("%d of %d batch sends (%.1f%%) answered 429, want at most 10%%", refused, admitted+refused, 100*share)
	}
}
