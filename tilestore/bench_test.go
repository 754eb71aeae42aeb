package tilestore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// Each benchmark builds its database once in the outer function and
// measures in a b.Run sub-benchmark: the testing package reruns a
// benchmark body with growing b.N, and seeding 1M rows per rerun would
// swamp the measurement.

// latencies collects per-operation durations and reports percentiles.
type latencies []time.Duration

func (l *latencies) time(f func()) {
	start := time.Now()
	f()
	*l = append(*l, time.Since(start))
}

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	pct := func(p float64) float64 {
		i := int(p * float64(len(s)-1))
		return float64(s[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// A tile's upload_attempts rises in one place: CountRejectionsUpTo, which
// counts the rejections a settlement or a claim recorded. The next two
// benchmarks time it on a flight whose tiles have one uncounted rejection
// each (recorded untimed before each count), under a per-tile budget no
// tile reaches: attempts rise, nothing is given up. maxTiles 0 counts
// them in one transaction, as the retry decorator does for up to a few
// thousand tiles on the default flight data recorder.

// neverReached is a per-tile budget no benchmark tile reaches.
const neverReached = 1 << 30

// recordRejections records one uncounted rejection under op for each
// tile, as a settlement does for the tiles the provider rejected.
func recordRejections(b *testing.B, s *tilestore.Store, op string, ids []string) {
	b.Helper()
	if _, err := s.Pool().Exec(context.Background(), `INSERT INTO upload_rejections (op_id, tile_id, reason, message)
SELECT $1, tile_id, 'invalid_tile', 'the provider rejected this tile' FROM unnest($2::text[]) AS u(tile_id)`, op, ids); err != nil {
		b.Fatal(err)
	}
}

// countRaisesAttempts times counting n tiles' rejections, a window of n
// of ids moved along on each iteration, and checks each count raised n.
func countRaisesAttempts(b *testing.B, s *tilestore.Store, flight string, ids []string, n int) {
	ctx := context.Background()
	var lat latencies
	i := 0
	for b.Loop() {
		b.StopTimer()
		start := (i * n) % len(ids)
		recordRejections(b, s, operation.NewID(), ids[start:start+n]) // new on every run of the body
		i++
		b.StartTimer()
		lat.time(func() {
			res, err := s.CountRejectionsUpTo(ctx, flight, neverReached, 0, "", nil)
			if err != nil || res.Counted != n || len(res.GaveUp) != 0 {
				b.Fatalf("count raised %d tiles' attempts (%d given up), want %d: %v", res.Counted, len(res.GaveUp), n, err)
			}
		})
	}
	lat.report(b)
}

func BenchmarkCountRejectionsOneTile(b *testing.B) {
	s := newStore(b)
	ids := seedFlight(b, s, "BF", 1000)
	b.Run("one", func(b *testing.B) { countRaisesAttempts(b, s, "BF", ids, 1) })
}

func BenchmarkCountRejections1000Tiles(b *testing.B) {
	s := newStore(b)
	ids := seedFlight(b, s, "BF", 5000)
	b.Run("1000", func(b *testing.B) { countRaisesAttempts(b, s, "BF", ids, 1000) })
}

// seedMillion adds a flight of n tiles in one statement: 90% pending, the
// rest uploaded, so the partial index has something to skip.
func seedMillion(b *testing.B, s *tilestore.Store, flight string, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := s.UpsertFlight(ctx, flight, tilestore.FlightOnGround); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	_, err := s.Pool().Exec(ctx, `
INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at, voting_status)
SELECT $1 || '-' || lpad(g::text, 8, '0'), $1, 18, g % 262144, g / 262144, 'image/png', 20000,
       md5(g::text) || md5((g + 1)::text), $1 || '/18/' || (g % 262144) || '/' || (g / 262144) || '.png',
       now(), CASE WHEN g % 10 = 0 THEN 'uploaded' ELSE 'pending' END
  FROM generate_series(1, $2::int) AS g`, flight, n)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE tiles`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d tiles in %v", n, time.Since(start).Round(time.Millisecond))
}

func BenchmarkPendingUploadsFirstPage(b *testing.B) {
	s := newStore(b)
	seedMillion(b, s, "BIG", 1_000_000)
	ctx := context.Background()
	for _, limit := range []int{256, 1000} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			var lat latencies
			for b.Loop() {
				lat.time(func() {
					page, err := s.PendingUploads(ctx, "BIG", "", limit)
					if err != nil || len(page) != limit {
						b.Fatalf("page of %d, %v", len(page), err)
					}
				})
			}
			lat.report(b)
		})
	}
}

func BenchmarkInsertTiles10k(b *testing.B) {
	s := newStore(b)
	seedFlight(b, s, "BF", 0)
	ctx := context.Background()
	b.Run("10k", func(b *testing.B) {
		round := 0
		for b.Loop() {
			b.StopTimer()
			tiles := make([]tilestore.Tile, 10_000)
			for i := range tiles {
				tiles[i] = tile("BF", round*10_000+i)
				tiles[i].ID = fmt.Sprintf("BF-r%03d-%05d", round, i)
			}
			round++
			b.StartTimer()
			n, err := s.InsertTiles(ctx, tiles)
			if err != nil || n != len(tiles) {
				b.Fatalf("inserted %d, %v", n, err)
			}
		}
	})
}
