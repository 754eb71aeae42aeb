package linkbench

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkUploadPendingProcess times the whole `tilectl upload-pending`
// process (start, database, capabilities, upload, settlement, summary) at
// default settings on loopback against the in-memory sink, at the sink's
// default batch limit (256 tiles) and at 64-tile batches, against the
// naive client (its capabilities request and batches of the same size)
// at concurrency 4 in the same run:
// tilectl, naive, naive, tilectl (TILECTL_BENCH_ROUNDS times, at least
// 2: runs of a second are at the mercy of whatever else the machine does),
// each side's best reported (tilectl-tiles/s, naive-tiles/s). It is the process-level companion of
// the in-process BenchmarkUploadPendingVsBaseline of internal/cli/upload:
// small batches show the per-batch costs (a durable claim and a
// settlement each) that the link profiles with small batches pay too.
func BenchmarkUploadPendingProcess(b *testing.B) {
	for _, c := range []struct {
		name        string
		tiles, size int
	}{
		{"1KiB", 10000, 1 << 10},
		{"16KiB", 5000, 16 << 10},
		{"64KiB", 2000, 64 << 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := newRig(b, "P"+c.name, c.tiles, c.size, 0)
			for _, batch := range []int{256, 64} {
				b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchProcess(b, r, batch) })
			}
		})
	}
}

func benchProcess(b *testing.B, r *rig, batch int) {
	const conc = 4
	rounds := 2
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_ROUNDS")); err == nil && v > rounds {
		rounds = v
	}
	r.sink.SetMaxBatchTiles(batch)
	var bestT, bestN time.Duration
	tilectl := func() {
		r.reset(b)
		b.StartTimer()
		res := r.tilectl(b, r.sink.URL, 5*time.Minute, nil)
		b.StopTimer()
		if res.exit != 0 {
			b.Fatalf("tilectl exited %d:\n%s", res.exit, tail(res.stderr))
		}
		r.checkHeld(b, "tilectl")
		if bestT == 0 || res.elapsed < bestT {
			bestT = res.elapsed
		}
	}
	naive := func() {
		r.reset(b)
		if d := r.naive(b, r.sink.URL, conc).whole; bestN == 0 || d < bestN {
			bestN = d
		}
	}
	b.ResetTimer()
	b.StopTimer()
	for range b.N * rounds {
		tilectl()
		naive()
		naive()
		tilectl()
	}
	n := float64(len(r.tiles))
	b.ReportMetric(n/bestT.Seconds(), "tilectl-tiles/s")
	b.ReportMetric(n/bestN.Seconds(), "naive-tiles/s")
	b.Logf("%d tiles, %d-tile batches: tilectl process %v, naive %v (best of %d each), tilectl/naive %.2f",
		len(r.tiles), batch, bestT.Round(time.Millisecond), bestN.Round(time.Millisecond), 2*b.N*rounds, bestN.Seconds()/bestT.Seconds())
}
