package tiles

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// BenchmarkScan: the first pass over the 48 test tiles (no database).
func BenchmarkScan(b *testing.B) {
	for b.Loop() {
		valid, problems, _, err := scan(context.Background(), tilesDir, 4096)
		if err != nil || valid != 48 || len(problems) != 0 {
			b.Fatalf("scan: %d tiles, %v, %v", valid, problems, err)
		}
	}
	b.ReportMetric(float64(48*b.N)/b.Elapsed().Seconds(), "tiles/s")
}

// BenchmarkImport: a full import of the 48 test tiles as a new flight each
// time (scan, cache copy, one syncfs, one batched insert).
func BenchmarkImport(b *testing.B) {
	benchImport(b, tilesDir, 48)
}

// benchImport imports dir (n tiles) as a new flight per iteration.
func benchImport(b *testing.B, dir string, n int) {
	e := newEnv(b)
	i := 0
	for b.Loop() {
		i++
		err := ImportRun(context.Background(), &ImportOptions{
			IO: e.f.IOStreams, Config: e.f.Config, Store: e.f.Store,
			Dir: dir, FlightID: fmt.Sprintf("bench-%d", i), State: tilestore.FlightOnGround,
			BatchSize: DefaultBatchSize, Output: "json",
		})
		if err != nil {
			b.Fatal(err)
		}
		e.out.Reset()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tiles/s")
}

// BenchmarkImport10k: `tiles import` of 10,000 small distinct PNG tiles as a
// new flight each iteration (the target: well under 10 s).
func BenchmarkImport10k(b *testing.B) {
	dir := b.TempDir()
	const side = 100 // 100 x 100 tiles at z=14
	for x := 0; x < side; x++ {
		if err := os.MkdirAll(filepath.Join(dir, "14", strconv.Itoa(x)), 0o755); err != nil {
			b.Fatal(err)
		}
		for y := 0; y < side; y++ {
			img := image.NewNRGBA(image.Rect(0, 0, 4, 4))
			img.Set(0, 0, color.NRGBA{R: uint8(x), G: uint8(y), B: uint8(x ^ y), A: 255})
			var buf bytes.Buffer
			if err := png.Encode(&buf, img); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "14", strconv.Itoa(x), strconv.Itoa(y)+".png"), buf.Bytes(), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	benchImport(b, dir, side*side)
}

// BenchmarkImport16KiB10k: ImportRun in this process over 10,000 distinct
// tiles of 16 KiB as a new flight each iteration, with the largest Go heap
// seen (sampled every 5 ms): the one to profile (-cpuprofile). The target
// rows come from the real binary (BenchmarkImportProcess).
func BenchmarkImport16KiB10k(b *testing.B) {
	dir := b.TempDir()
	writeNoiseTiles(b, dir, 10_000, 16<<10)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
			}
		}
	}()
	benchImport(b, dir, 10_000)
	close(stop)
	<-sampled
	b.ReportMetric(float64(peak.Load())/(1<<20), "MB-heap-peak")
}
