package tiles

import (
	"context"
	"fmt"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// BenchmarkScan: validating and hashing the 48 test tiles (no database).
func BenchmarkScan(b *testing.B) {
	for b.Loop() {
		tiles, problems, err := scan(context.Background(), tilesDir)
		if err != nil || len(tiles) != 48 || len(problems) != 0 {
			b.Fatalf("scan: %d tiles, %v, %v", len(tiles), problems, err)
		}
	}
	b.ReportMetric(float64(48*b.N)/b.Elapsed().Seconds(), "tiles/s")
}

// BenchmarkImport: a full import of the 48 test tiles as a new flight each
// time (scan, cache copy with fsync, one batched insert).
func BenchmarkImport(b *testing.B) {
	e := newEnv(b)
	i := 0
	for b.Loop() {
		i++
		err := ImportRun(context.Background(), &ImportOptions{
			IO: e.f.IOStreams, Config: e.f.Config, Store: e.f.Store,
			Dir: tilesDir, FlightID: fmt.Sprintf("bench-%d", i), State: tilestore.FlightOnGround,
			BatchSize: DefaultBatchSize, Output: "json",
		})
		if err != nil {
			b.Fatal(err)
		}
		e.out.Reset()
	}
	b.ReportMetric(float64(48*b.N)/b.Elapsed().Seconds(), "tiles/s")
}
