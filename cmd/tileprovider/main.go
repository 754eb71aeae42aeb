// Command tileprovider runs the reference satellite provider
// (docs/provider-api.md) for tests, chaos runs and local development.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tileprovider:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("tileprovider", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8765", "address to listen on")
	dbURL := fs.String("database-url", os.Getenv("TILEPROVIDER_DATABASE_URL"), "Postgres URL (env TILEPROVIDER_DATABASE_URL)")
	storage := fs.String("storage-dir", "./tileprovider-data", "directory tiles are stored in")
	token := fs.String("token", "", "bearer token (prefer env TILEPROVIDER_TOKEN: flags show up in ps)")
	rate := fs.Float64("fault-rate", 0, "share of batch requests that get an injected fault (0..1)")
	seed := fs.Int64("fault-seed", 1, "seed of the fault RNG")
	kinds := fs.String("fault-kinds", "all", "comma-separated fault kinds, or all")
	reject := fs.String("reject-tiles", "", "comma-separated tile IDs always rejected with decode_error")
	transient := fs.Float64("transient-reject-rate", 0, "share of tiles not yet held that are rejected storage_busy (0..1)")
	latency := fs.Duration("latency", 0, "delay added to every batch request")
	strict := fs.Bool("strict-sequencing", false, "enforce Client-Id / Client-Sequence")
	maxTiles := fs.Int("max-batch-tiles", 256, "max_batch_tiles advertised and enforced")
	maxBytes := fs.Int64("max-batch-bytes", 32<<20, "max_batch_bytes advertised and enforced")
	maxTile := fs.Int64("max-tile-bytes", 4<<20, "max_tile_bytes advertised and enforced")
	retention := fs.Duration("retention", 24*time.Hour, "how long an Idempotency-Key is replayed")
	gcEvery := fs.Duration("gc-every", provider.DefaultGCEvery, "how often operation records expired for longer than --retention are deleted")
	// Usage goes to stdout when asked for (exit 0), to stderr with the
	// error of a bad command line (exit 1).
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, werr := os.Stdout.Write(usage.Bytes())
			return werr
		}
		_, _ = os.Stderr.Write(usage.Bytes())
		return err
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	if *token == "" {
		*token = os.Getenv("TILEPROVIDER_TOKEN")
	}
	if *token == "" {
		return errors.New("a token is required: set TILEPROVIDER_TOKEN or --token")
	}
	if *dbURL == "" {
		return errors.New("--database-url is required")
	}
	fk, err := provider.ParseFaultKinds(*kinds)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer pool.Close()
	if err := provider.EnsureSchema(ctx, pool); err != nil {
		return err
	}
	srv, err := provider.New(provider.Config{
		Pool: pool, StorageDir: *storage, Token: *token, StrictSequencing: *strict, Retention: *retention, GCEvery: *gcEvery,
		Limits: provider.Limits{MaxBatchTiles: *maxTiles, MaxBatchBytes: *maxBytes, MaxTileBytes: *maxTile},
		Faults: provider.FaultConfig{Rate: *rate, Seed: *seed, Kinds: fk, RejectTileIDs: splitList(*reject),
			TransientRejectRate: *transient, Latency: *latency},
		Logger: log,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	hs := &http.Server{Addr: *listen, Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	log.Info().Str("listen", *listen).Float64("fault_rate", *rate).Int64("fault_seed", *seed).Msg("tileprovider serving")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
