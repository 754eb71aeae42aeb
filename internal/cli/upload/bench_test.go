package upload

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

// BenchmarkUploadPendingVsBaseline is issue #11's measure of the client's
// cost per tile: upload-pending's production path (uploadRun: flight lock,
// retry decorator, HTTP uploader, Postgres journal, FDR) against
// providertest.BaselineUpload (the same tiles in the same 256-tile batches
// with the same concurrency, 4, and no journal), both against the
// in-memory providertest.Sink, which checks every part's size and sha256
// but stores nothing, so the client is what is measured (each side also
// reports the postgres processes' CPU time per tile: on a 2-core machine
// the journal's queries take cores from the client). The two alternate
// in one run (tilectl, baseline, baseline, tilectl per round) and each
// reports its best. 1KiBx100k is the scaling line: its per-tile time
// against 1KiB's. TILECTL_BENCH_ROUNDS (default 1) repeats the rounds;
// TILECTL_BENCH_SCALE_TILES (default 100000) sizes the scaling flight.
func BenchmarkUploadPendingVsBaseline(b *testing.B) {
	scale := 100000
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_SCALE_TILES")); err == nil && v > 0 {
		scale = v
	}
	for _, c := range []struct {
		name        string
		tiles, size int
	}{
		{"1KiB", 10000, 1 << 10},
		{"16KiB", 5000, 16 << 10},
		{"64KiB", 2000, 64 << 10},
		{"1KiBx100k", scale, 1 << 10},
	} {
		b.Run(c.name, func(b *testing.B) { benchVsBaseline(b, c.tiles, c.size) })
	}
}

const benchSinkFlight = "fsink"

func benchVsBaseline(b *testing.B, n, size int) {
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	sink := providertest.StartSink(b)
	c := providertest.NewClient(b, benchSinkFlight)
	tiles := c.AddTiles(b, benchSinkFlight, n, size, 11)
	const batch, workers = 256, 4
	var batches [][]tilestore.Tile
	for i := 0; i < len(tiles); i += batch {
		batches = append(batches, tiles[i:min(i+batch, len(tiles))])
	}
	dir := b.TempDir()
	cfg := *config.Default(func(string) string { return "" })
	cfg.DatabaseURL = c.URL
	cfg.CacheDir = c.Blobs.Root()
	cfg.ProviderURL = sink.URL
	cfg.ProviderToken = config.NewSecret(providertest.Token)
	cfg.FDRPath = filepath.Join(dir, "fdr.ring")
	cfg.Upload.Concurrency = config.Concurrency(workers)
	cfg.Upload.BatchSize = batch
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

	tilectl := func() error {
		ios, _, _, _ := iostreams.Test()
		opts := &Options{
			IO:     ios,
			Config: func() (*config.Config, error) { c := cfg; return &c, nil },
			Logger: func() zerolog.Logger { return zerolog.New(io.Discard).Level(zerolog.InfoLevel) },
			Store:  func(context.Context) (*tilestore.Store, error) { return c.Store, nil },
			Clock:  &instantClock{},
			NewTicker: func(time.Duration) (<-chan time.Time, func()) {
				return make(chan time.Time), func() {}
			},
			Version: "bench", Output: "json", FlightID: benchSinkFlight,
		}
		return uploadRun(context.Background(), opts)
	}
	baseline := func() error {
		failed, err := providertest.BaselineUpload(context.Background(), client, sink.URL, providertest.Token,
			benchSinkFlight, c.Blobs, batches, workers)
		if len(failed) > 0 {
			return fmt.Errorf("%d batches failed: %w", len(failed), err)
		}
		return err
	}
	type side struct {
		name   string
		run    func() error
		best   time.Duration
		allocs uint64
		pgCPU  time.Duration // the postgres processes' CPU time in the best run
		pgOK   bool          // pgCPU could be measured (pgtest.ServerCPU)
		cpu    time.Duration // this process's CPU time (the side and the sink) in the best run
	}
	sides := []*side{{name: "tilectl", run: tilectl}, {name: "baseline", run: baseline}}
	measure := func(s *side) {
		b.StopTimer()
		benchResetSink(b, c, sink)
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		pg0, pgOK := pgtest.ServerCPU()
		cpu0 := processCPU()
		b.StartTimer()
		t0 := time.Now()
		var err error
		// The side's label splits a -cpuprofile of the benchmark by side:
		// go tool pprof -tagfocus side=tilectl.
		pprof.Do(context.Background(), pprof.Labels("side", s.name), func(context.Context) { err = s.run() })
		d := time.Since(t0)
		b.StopTimer()
		cpu := processCPU() - cpu0
		pg1, pgOK1 := pgtest.ServerCPU()
		pgCPU := pg1 - pg0
		runtime.ReadMemStats(&m1)
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		if held, bad := sink.Held(), sink.BadParts.Load(); held != n || bad != 0 {
			b.Fatalf("%s: the sink holds %d of %d tiles, %d bad parts", s.name, held, n, bad)
		}
		if s.best == 0 || d < s.best {
			s.best, s.allocs, s.pgCPU, s.pgOK, s.cpu = d, m1.Mallocs-m0.Mallocs, pgCPU, pgOK && pgOK1, cpu
		}
		b.StartTimer()
	}
	for range b.N {
		for range rounds {
			measure(sides[0])
			measure(sides[1])
			measure(sides[1])
			measure(sides[0])
		}
	}
	for _, s := range sides {
		b.ReportMetric(float64(n)/s.best.Seconds(), s.name+"-tiles/s")
		b.ReportMetric(float64(s.best.Microseconds())/float64(n), s.name+"-us/tile")
		b.ReportMetric(float64(s.allocs)/float64(n), s.name+"-allocs/tile")
		b.ReportMetric(float64(s.cpu.Microseconds())/float64(n), s.name+"-cpu-us/tile")
		if s.pgOK {
			b.ReportMetric(float64(s.pgCPU.Microseconds())/float64(n), s.name+"-pg-cpu-us/tile")
		}
	}
	b.ReportMetric(float64(n), "tiles")
	b.Logf("%d tiles of ~%d B: tilectl %v, baseline %v (best of %d each), throughput ratio %.2f",
		n, size, sides[0].best, sides[1].best, 2*rounds*b.N, sides[1].best.Seconds()/sides[0].best.Seconds())
}

// processCPU is this process's CPU time so far (user and system, every
// thread): the side being measured and the in-process sink.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchResetSink makes every tile uploadable again, as a flight just
// imported (pgtest.ResetUploads), and empties the sink.
func benchResetSink(b *testing.B, c *providertest.Client, sink *providertest.Sink) {
	b.Helper()
	ctx := context.Background()
	if err := pgtest.ResetUploads(ctx, c.Store.Pool()); err != nil {
		b.Fatal(err)
	}
	sink.Reset()
}

// BenchmarkUploadPendingFirstBatch1M is the time from the start of
// upload-pending (uploadRun) to its first batch arriving at the sink, for a
// flight of TILECTL_BENCH_FIRST_BATCH_TILES (default 1,000,000) pending
// tiles: the start must not cost time in proportion to the flight. Only
// the first 2,000 tiles have blobs; the run is cancelled once the first
// batch is on the wire.
func BenchmarkUploadPendingFirstBatch1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_FIRST_BATCH_TILES")); err == nil && v > 0 {
		n = v
	}
	sink := providertest.StartSink(b)
	c := providertest.NewClient(b, benchSinkFlight)
	withBlobs := min(n, 2000)
	tiles := c.AddTiles(b, benchSinkFlight, withBlobs, 1<<10, 12)
	ctx := context.Background()
	// The rest are rows only, made by the server (sorted after the tiles
	// with blobs: "x" > digits), like the first tile in every column.
	if n > withBlobs {
		t := tiles[0]
		if _, err := c.Store.Pool().Exec(ctx, `INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at, voting_status)
			SELECT $1 || '-x' || lpad(i::text, 7, '0'), $1, $2, i % 100000, 43079 + i / 100000, $3, $4, $5, $1 || '/none/' || i || '.png', $6, 'trusted'
			  FROM generate_series($7::int, $8::int) AS i`,
			benchSinkFlight, t.Z, t.ContentType, t.SizeBytes, t.SHA256, t.CapturedAt, withBlobs, n-1); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.Store.Pool().Exec(ctx, `VACUUM ANALYZE tiles`); err != nil {
		b.Fatal(err)
	}
	cfg := *config.Default(func(string) string { return "" })
	cfg.DatabaseURL = c.URL
	cfg.CacheDir = c.Blobs.Root()
	cfg.ProviderURL = sink.URL
	cfg.ProviderToken = config.NewSecret(providertest.Token)
	cfg.FDRPath = filepath.Join(b.TempDir(), "fdr.ring")
	var best time.Duration
	for range b.N {
		b.StopTimer()
		// Only the first batches were sent: put back what they changed.
		for _, q := range []string{
			`TRUNCATE upload_rejections, upload_batches CASCADE`,
			`UPDATE tiles SET voting_status = 'trusted', uploaded_at = NULL, upload_attempts = 0 WHERE voting_status <> 'trusted' OR upload_attempts <> 0`,
		} {
			if _, err := c.Store.Pool().Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		sink.Reset()
		b.StartTimer()
		rctx, cancel := context.WithCancel(ctx)
		ios, _, _, _ := iostreams.Test()
		opts := &Options{
			IO:     ios,
			Config: func() (*config.Config, error) { c := cfg; return &c, nil },
			Logger: func() zerolog.Logger { return zerolog.New(io.Discard) },
			Store:  func(context.Context) (*tilestore.Store, error) { return c.Store, nil },
			Clock:  &instantClock{},
			NewTicker: func(time.Duration) (<-chan time.Time, func()) {
				return make(chan time.Time), func() {}
			},
			Version: "bench", Output: "json", FlightID: benchSinkFlight,
		}
		done := make(chan error, 1)
		t0 := time.Now()
		go func() { done <- uploadRun(rctx, opts) }()
		select {
		case <-sink.FirstBatch:
		case err := <-done:
			b.Fatalf("the run ended before its first batch: %v", err)
		}
		d := time.Since(t0)
		cancel()
		<-done
		if best == 0 || d < best {
			best = d
		}
	}
	b.ReportMetric(float64(best.Microseconds())/1000, "first-batch-ms")
	b.ReportMetric(float64(n), "tiles")
}
