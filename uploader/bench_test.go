package uploader_test

import (
	"context"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

const benchFlight = "fbench"

func benchTiles() int {
	if n, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_TILES")); err == nil && n > 0 {
		return n
	}
	return 2000
}

// benchReset makes every tile pending again, rewrites the tiles table as an
// import leaves it, and empties the provider, so each iteration uploads the
// whole flight into a provider that holds none.
func benchReset(b testing.TB, c *providertest.Client, p *providertest.Provider) {
	b.Helper()
	ctx := context.Background()
	if err := pgtest.ResetUploads(ctx, c.Store.Pool()); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{`DELETE FROM provider_tiles`, `DELETE FROM provider_tile_writes`,
		`DELETE FROM provider_rejections`, `DELETE FROM provider_op_fingerprints`, `DELETE FROM operation_records`} {
		if _, err := p.Pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEndToEnd moves N tiles of about 16 KiB from Postgres and disk to
// the in-process provider over loopback: "tilectl" is the HTTP uploader,
// "baseline" a client that posts the same bytes in the same batches with
// the same concurrency, follows the contract and does no bookkeeping
// (providertest.BaselineUploadRetrying).
func BenchmarkEndToEnd(b *testing.B) {
	benchEndToEnd(b, 0)
}

// BenchmarkEndToEndFaults20 is the same with faults on 20% of batch
// requests (every kind of provider.FaultKind in turn). The baseline waits
// what the contract asks before resending a batch under its key, and only
// that: the answer's Retry-After or retry extension, else the contract's
// table for its status (1 s for 409 IDEMPOTENCY_PROCESSING, from 2 s for a
// 502), and none before the first resend after a broken connection or a
// cut-off answer; a waiting batch holds none of its workers, and once due
// it goes before the batches not sent yet, on one of the same 4 workers.
// tilectl waits what the contract asks too, on real timers, as in
// production, but in its own way: it waits apart only a wait the answer
// names (the 429's, 503's and 409's here) and holds a worker for the
// table's own backoff (the HTML 502's); its batches that waited apart go,
// once due, before the batches not sent yet, in slots of the same limit
// of 4 (dueBatches). The ratio is what tilectl adds to the contract's
// waits, those differences included.
func BenchmarkEndToEndFaults20(b *testing.B) {
	benchEndToEnd(b, 0.2)
}

// benchEndToEnd times tilectl and the baseline in alternated rounds
// (tilectl, baseline, baseline, tilectl; TILECTL_BENCH_ROUNDS rounds, 2 at
// least), so that a slow moment of the machine does not fall on one side
// only, and reports the best of each side as its sub-benchmark's ns/op and
// MB/s. Each upload starts the provider's fault draws again from their
// seed: the n-th batch request of either side meets the same fault, so a
// fault that falls late, and its wait at the tail, falls on both.
func benchEndToEnd(b *testing.B, faultRate float64) {
	n := benchTiles()
	const batch, workers = 64, 4
	rounds := 2
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_ROUNDS")); err == nil && v > rounds {
		rounds = v
	}
	p := providertest.Start(b, func(cfg *provider.Config) {
		cfg.SkipFsync = true
		cfg.Faults = provider.FaultConfig{Rate: faultRate, Seed: 1}
	})
	c := providertest.NewClient(b, benchFlight)
	tiles := c.AddTiles(b, benchFlight, n, 16<<10, 99)
	var total int64
	for _, t := range tiles {
		total += t.SizeBytes
	}
	var batches [][]tilestore.Tile
	for i := 0; i < len(tiles); i += batch {
		batches = append(batches, tiles[i:min(i+batch, len(tiles))])
	}
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	tilectl := func() {
		for run := 0; ; run++ {
			// A new uploader for each run, as production has one per
			// process: no breaker, pacer, adaptive limit or connection
			// carries over from an earlier upload. It waits on real timers
			// (operation.Sleep), not on the tests' recorded sleeps.
			u, _ := newUploader(b, p.URL, c, func(o *uploader.ClientOptions) { o.Sleep = operation.Sleep })
			rep, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: benchFlight, BatchSize: batch, Concurrency: workers})
			if err == nil && rep.Pending == 0 {
				return
			}
			if run > 20 {
				b.Fatalf("still pending: %+v %v", rep, err)
			}
		}
	}
	baseline := func() {
		if err := providertest.BaselineUploadRetrying(context.Background(), client, p.URL, providertest.Token, benchFlight, c.Blobs,
			batches, workers); err != nil {
			b.Fatal(err)
		}
	}
	type run struct {
		d              time.Duration
		bytes, mallocs uint64 // allocated in the process (the provider's included)
	}
	var best [2]run
	measure := func(side int, upload func()) {
		benchReset(b, c, p)
		p.Server.RestartFaults()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		t0 := time.Now()
		upload()
		d := time.Since(t0)
		runtime.ReadMemStats(&m1)
		if best[side].d == 0 || d < best[side].d {
			best[side] = run{d, m1.TotalAlloc - m0.TotalAlloc, m1.Mallocs - m0.Mallocs}
		}
	}
	for range rounds {
		measure(0, tilectl)
		measure(1, baseline)
		measure(1, baseline)
		measure(0, tilectl)
	}
	// The sub-benchmarks only report what was measured above: with a
	// -benchtime in seconds the framework calls them with a growing b.N
	// that means nothing here, and every figure is the best upload's.
	report := func(r run) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportMetric(float64(r.d.Nanoseconds()), "ns/op")
			b.ReportMetric(float64(total)/1e6/r.d.Seconds(), "MB/s")
			b.ReportMetric(float64(r.bytes), "B/op")
			b.ReportMetric(float64(r.mallocs), "allocs/op")
		}
	}
	b.Run("tilectl", report(best[0]))
	b.Run("baseline", report(best[1]))
	b.Logf("N=%d tiles, %.1f MiB: tilectl %v, baseline %v (best of %d each), throughput ratio tilectl/baseline = %.2f",
		n, float64(total)/(1<<20), best[0].d.Round(time.Millisecond), best[1].d.Round(time.Millisecond), 2*rounds,
		best[1].d.Seconds()/best[0].d.Seconds())
}
