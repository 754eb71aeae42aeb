package scaleout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
)

// BenchmarkScaleOut runs 1, 2 and 4 upload-pending processes at once on one
// flight against a latency-bound provider (50 ms per batch, as a satellite
// link), each with 2 batches in flight: tiles/s is the flight's size over
// the time from the first start to the last exit, process start-up
// included.
func BenchmarkScaleOut(b *testing.B) {
	for _, procs := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			const n = 1200
			r := newRig(b, "BS", n, 50*time.Millisecond, nil)
			testbin.Tilectl(b) // built before the clock starts
			flags := []string{"--batch-size", "20", "--concurrency", "2"}
			var total time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if err := pgtest.ResetUploads(context.Background(), r.store.Pool()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				var ps []*proc
				for range procs {
					ps = append(ps, r.start(flags...))
				}
				for _, p := range ps {
					if code, sum := p.wait(b); code != 0 {
						b.Fatalf("exit %d: %v\n%s", code, sum, p.errb.String())
					}
				}
				total += time.Since(start)
			}
			if c := r.counts(); c["uploaded"] != n {
				b.Fatalf("statuses %v, want all uploaded", c)
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "tiles/s")
		})
	}
}
