package uploader_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
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
func benchReset(b *testing.B, c *providertest.Client, p *providertest.Provider) {
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
// the same concurrency and does no bookkeeping.
func BenchmarkEndToEnd(b *testing.B) {
	benchEndToEnd(b, 0)
}

// BenchmarkEndToEndFaults20 is the same with faults on 20% of batch
// requests; the baseline resends a failed batch until it is answered.
func BenchmarkEndToEndFaults20(b *testing.B) {
	benchEndToEnd(b, 0.2)
}

func benchEndToEnd(b *testing.B, faultRate float64) {
	n := benchTiles()
	const batch, workers = 64, 4
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
	var perOp [2]time.Duration

	b.Run("tilectl", func(b *testing.B) {
		u, _ := newUploader(b, p.URL, c, nil)
		perOp[0] = 0 // b.Run calls this again with a larger b.N
		b.SetBytes(total)
		for range b.N {
			b.StopTimer()
			benchReset(b, c, p)
			b.StartTimer()
			t0 := time.Now()
			for run := 0; ; run++ {
				rep, err := u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: benchFlight, BatchSize: batch, Concurrency: workers})
				if err == nil && rep.Pending == 0 {
					break
				}
				if run > 20 {
					b.Fatalf("still pending: %+v %v", rep, err)
				}
			}
			perOp[0] += time.Since(t0)
		}
		perOp[0] /= time.Duration(b.N)
	})
	b.Run("baseline", func(b *testing.B) {
		client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		perOp[1] = 0
		b.SetBytes(total)
		for range b.N {
			b.StopTimer()
			benchReset(b, c, p)
			b.StartTimer()
			t0 := time.Now()
			pending := batches
			for run := 0; len(pending) > 0; run++ {
				if run > 50 {
					b.Fatal("baseline never got every batch answered")
				}
				failed, err := providertest.BaselineUpload(context.Background(), client, p.URL, providertest.Token, benchFlight, c.Blobs,
					pending, workers)
				if err != nil && faultRate == 0 {
					b.Fatal(err)
				}
				pending = failed
			}
			perOp[1] += time.Since(t0)
		}
		perOp[1] /= time.Duration(b.N)
	})
	if perOp[0] > 0 && perOp[1] > 0 {
		b.Logf("N=%d tiles, %.1f MiB: tilectl %v, baseline %v, throughput ratio tilectl/baseline = %.2f",
			n, float64(total)/(1<<20), perOp[0], perOp[1], float64(perOp[1])/float64(perOp[0]))
	}
}
