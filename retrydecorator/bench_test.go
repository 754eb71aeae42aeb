package retrydecorator

import (
	"context"
	"io"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/uploader"
)

// BenchmarkDecoratorSuccessOverhead measures what the decorator adds to a
// call whose inner upload succeeds at once: the start log line (JSON,
// discarded), the count before the call against an in-memory store, and
// the report aggregation. Target (internal/benchreport): < 5 ms.
func BenchmarkDecoratorSuccessOverhead(b *testing.B) { benchSuccess(b, zerolog.New(io.Discard)) }

func benchSuccess(b *testing.B, log zerolog.Logger) {
	st := newMemStore(flight, tileIDs("t", 100)...)
	rep := uploader.Report{FlightID: flight, Outcome: uploader.OutcomeSuccess, Accepted: 100, Batches: 1}
	inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		return rep, nil
	}}
	u := New(inner, st, &memRecorder{}, log, &fakeClock{now: t0}, defaultConfig(), Hooks{})
	ctx := context.Background()
	req := uploader.Request{FlightID: flight}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := u.UploadPendingTiles(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
