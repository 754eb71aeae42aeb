package retrydecorator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tilectl/tilectl/uploader"
)

// An inner call that ends partial as the run's deadline comes (a resend
// the deadline cut on the wire, its outcome unknown, and no other work
// that waits) left work the deadline cut: the run ends with the
// deadline's error and no next_retry_at, whatever its in-call budget. A
// spent budget's next_retry_at (now + backoff_cap) is for a run whose
// retries ran out, not one its deadline ended.
func TestAPartialCallEndedByTheDeadlineFailsWithTheDeadlineWhateverTheBudget(t *testing.T) {
	for _, budget := range []int{0, 3} {
		st := newMemStore(flight, "cut")
		inner := &fakeInner{UploadFunc: func(ctx context.Context, _ uploader.Request) (uploader.Report, error) {
			<-ctx.Done() // the deadline comes as the call ends
			return uploader.Report{FlightID: flight, Outcome: uploader.OutcomePartial, Pending: 1}, nil
		}}
		cfg := defaultConfig()
		cfg.MaxInCallRetries = budget
		r := newRig(t, st, inner, cfg, Hooks{})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)

		got, err := r.u.UploadPendingTiles(ctx, uploader.Request{FlightID: flight})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("budget %d: error %v, want the deadline's", budget, err)
		}
		if got.NextRetryAt != nil || got.Pending != 1 {
			t.Errorf("budget %d: next_retry_at %v, pending %d: want none and the 1 tile the deadline cut", budget, got.NextRetryAt, got.Pending)
		}
		if inner.calls != 1 {
			t.Errorf("budget %d: %d inner calls, want 1", budget, inner.calls)
		}
	}
}
