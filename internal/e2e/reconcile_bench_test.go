package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

// BenchmarkReconcile100k is `tilectl tiles reconcile` (the real binary) of
// a flight of 100,000 uploaded tiles (TILECTL_BENCH_RECONCILE_TILES
// overrides) against the reference provider on loopback, which holds them
// all: the tile store and the provider's table are filled directly, so
// only the reconcile is timed. It reports the pass's seconds and tiles/s.
func BenchmarkReconcile100k(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_RECONCILE_TILES")); err == nil && v > 0 {
		n = v
	}
	const flight = "RB-1"
	ctx := context.Background()
	prov := providertest.Start(b, func(c *provider.Config) { c.Token = token; c.SkipFsync = true })
	dbURL := pgtest.NewURL(b)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	store := tilestore.NewStore(pool)
	if _, err := store.UpsertFlight(ctx, flight, tilestore.FlightOnGround); err != nil {
		b.Fatal(err)
	}
	tiles := make([]tilestore.Tile, n)
	held := make([][]any, n)
	now := time.Now()
	for i := range tiles {
		z, x := 17, int64(i)
		id := fmt.Sprintf("%s-%d-%d-7", flight, z, x)
		sum := providertest.SHA256([]byte(id))
		tiles[i] = tilestore.Tile{ID: id, FlightID: flight, Z: z, X: x, Y: 7, ContentType: "image/png", SizeBytes: 1024,
			SHA256: sum, BlobPath: fmt.Sprintf("%s/%d/%d/7.png", flight, z, x), CapturedAt: now}
		held[i] = []any{flight, id, sum, int64(1024), now, "unused"}
	}
	if _, err := store.InsertTiles(ctx, tiles); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tiles SET voting_status = 'uploaded', uploaded_at = now() WHERE flight_id = $1`, flight); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE tiles`); err != nil {
		b.Fatal(err)
	}
	if _, err := prov.Pool.CopyFrom(ctx, pgx.Identifier{"provider_tiles"},
		[]string{"flight_id", "tile_id", "sha256", "size", "received_at", "path"}, pgx.CopyFromRows(held)); err != nil {
		b.Fatal(err)
	}
	if _, err := prov.Pool.Exec(ctx, `ANALYZE provider_tiles`); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	env := append(testbin.Environ("XDG_CONFIG_HOME=", "HOME="), "HOME="+dir,
		"TILECTL_DATABASE_URL="+dbURL, "TILECTL_CACHE_DIR="+filepath.Join(dir, "cache"),
		"TILECTL_PROVIDER_URL="+prov.URL, "TILECTL_PROVIDER_TOKEN="+token)
	bin := testbin.Tilectl(b)
	var took time.Duration
	b.ResetTimer()
	for range b.N {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, "tiles", "reconcile", "--flight", flight, "-o", "json")
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
		took += testbin.RunFor(b, cmd, 5*time.Minute)
		var out struct {
			ExitCode int `json:"exit_code"`
			Held     int `json:"held"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.ExitCode != 0 || out.Held != n {
			b.Fatalf("reconcile: %+v (%v), want exit 0 with %d held\n%s\n%s", out, err, n, stdout.String(), stderr.String())
		}
	}
	b.StopTimer()
	per := took.Seconds() / float64(b.N)
	b.ReportMetric(per, "s")
	b.ReportMetric(float64(n)/per, "tiles/s")
}
