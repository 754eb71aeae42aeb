package tilestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// BenchmarkCountRejectionsChunked counts a mass give-up the way the retry
// decorator does: n tiles with one uncounted rejection each, a budget of
// 1, counted in chunks of 256 tiles (a 256 KiB flight data recorder's
// chunk), each chunk one transaction resuming after the last. It counts
// 10,000 and 40,000 give-ups alternately (the flight's tiles replaced and
// vacuumed before each, twice per iteration, the best of all rounds), and
// reports the cost per counted tile of each:
// linear counting keeps it the same at 40,000 as at 10,000 (benchreport
// prints the ratio).
func BenchmarkCountRejectionsChunked(b *testing.B) {
	s := newStore(b)
	seedFlight(b, s, "CR", 0)
	sizes := []int{10_000, 40_000}
	best := make([]time.Duration, len(sizes))
	for range b.N {
		for range 2 {
			for i, n := range sizes {
				b.StopTimer()
				seedRejected(b, s, "CR", n)
				b.StartTimer()
				t0 := time.Now()
				counted := countInChunks(b, s, "CR", 256)
				d := time.Since(t0)
				if counted != n {
					b.Fatalf("counted %d tiles, want %d", counted, n)
				}
				if best[i] == 0 || d < best[i] {
					best[i] = d
				}
			}
		}
	}
	for i, n := range sizes {
		b.ReportMetric(float64(best[i].Microseconds())/float64(n), fmt.Sprintf("us/row-%dk", n/1000))
	}
}

// countInChunks counts the flight's rejections in chunks of per tiles as
// the decorator does, and returns how many tiles it counted.
func countInChunks(b *testing.B, s *tilestore.Store, flight string, per int) int {
	b.Helper()
	ctx := context.Background()
	total := 0
	after := ""
	for {
		res, err := s.CountRejectionsUpTo(ctx, flight, 1, per, after, func(context.Context, []tilestore.GiveUp) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		total += len(res.Attempts)
		if len(res.Attempts) < per {
			return total
		}
		after = res.Last
	}
}

// seedRejected replaces the flight's tiles with n pending ones, each with
// one uncounted rejection, and vacuums, so every round starts alike.
func seedRejected(b *testing.B, s *tilestore.Store, flight string, n int) {
	b.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`DELETE FROM upload_rejections`,
		`DELETE FROM tiles`,
		fmt.Sprintf(`INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at)
SELECT '%[1]s-t' || lpad(i::text, 6, '0'), '%[1]s', 18, i, 7, 'image/png', 100, md5(i::text) || md5(i::text),
       '%[1]s/18/' || i || '/7.png', now()
  FROM generate_series(0, %[2]d - 1) i`, flight, n),
		`INSERT INTO upload_rejections (op_id, tile_id, reason, message)
SELECT 'op-mass', tile_id, 'invalid_tile', 'the provider rejected this tile' FROM tiles`,
		`VACUUM ANALYZE tiles`,
		`VACUUM ANALYZE upload_rejections`,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			b.Fatalf("seed: %s: %v", q, err)
		}
	}
}
