// Package providertest runs the reference provider in-process over real
// loopback HTTP on its own Postgres database, and builds the client side of
// an upload (a tile store database and a blob cache with tiles in them), for
// the tests and benchmarks of uploader and provider.
package providertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/tilestore"
)

// Token is the bearer token of providers started by Start.
const Token = "providertest-token-0123456789"

// Provider is a running in-process provider.
type Provider struct {
	URL    string
	Server *provider.Server
	HTTP   *httptest.Server
	Pool   *pgxpool.Pool
}

// Start runs a provider on a fresh empty database; edit adjusts its Config.
// Everything is torn down when the test ends.
func Start(tb testing.TB, edit func(*provider.Config)) *Provider {
	tb.Helper()
	url := pgtest.NewEmptyDatabase(tb)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatalf("providertest: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	if err := provider.EnsureSchema(ctx, pool); err != nil {
		tb.Fatalf("providertest: %v", err)
	}
	cfg := provider.Config{Pool: pool, StorageDir: tb.TempDir(), Token: Token, Logger: zerolog.Nop()}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := provider.New(cfg)
	if err != nil {
		tb.Fatalf("providertest: %v", err)
	}
	tb.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(hs.Close)
	return &Provider{URL: hs.URL, Server: srv, HTTP: hs, Pool: pool}
}

// Ledger reads GET /debug/ledger.
func (p *Provider) Ledger(tb testing.TB) provider.Ledger {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/debug/ledger", nil)
	req.Header.Set("Authorization", "Bearer "+Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("providertest: ledger: %v", err)
	}
	defer resp.Body.Close()
	var l provider.Ledger
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("providertest: ledger answered %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		tb.Fatalf("providertest: decode ledger: %v", err)
	}
	return l
}

// WaitForNoOperationRecords polls the provider's table until its scheduled
// GC has emptied it (the GC runs on its own ticker: nothing signals it),
// failing the test after within.
func (p *Provider) WaitForNoOperationRecords(tb testing.TB, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		var n int
		if err := p.Pool.QueryRow(context.Background(), `SELECT count(*) FROM operation_records`).Scan(&n); err != nil {
			tb.Fatalf("providertest: count operation records: %v", err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d operation record(s) still there after %s: the GC never collected them", n, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Client is the client side of an upload: a migrated tile store database
// and a blob cache.
type Client struct {
	Store *tilestore.Store
	Blobs *tilestore.BlobStore
	URL   string // the tile store database
}

// NewClient makes a fresh client side with an on_ground flight.
func NewClient(tb testing.TB, flightID string) *Client {
	tb.Helper()
	pool, url := pgtest.New(tb)
	blobs, err := tilestore.NewBlobStore(tb.TempDir())
	if err != nil {
		tb.Fatalf("providertest: %v", err)
	}
	c := &Client{Store: tilestore.NewStore(pool), Blobs: blobs, URL: url}
	if _, err := c.Store.UpsertFlight(context.Background(), flightID, tilestore.FlightOnGround); err != nil {
		tb.Fatalf("providertest: %v", err)
	}
	return c
}

// PNG returns size bytes that start like a PNG, the rest from rng.
func PNG(rng *rand.Rand, size int) []byte {
	b := make([]byte, size)
	rng.Read(b)
	copy(b, "\x89PNG\r\n\x1a\n")
	return b
}

// AddTiles puts n tiles of about size bytes into the flight, with blobs,
// and returns them in tile_id order. IDs are "<flight>-<i>" zero-padded.
func (c *Client) AddTiles(tb testing.TB, flightID string, n, size int, seed int64) []tilestore.Tile {
	tb.Helper()
	return c.AddTilesFrom(tb, flightID, 0, n, size, seed)
}

// AddTilesFrom is AddTiles numbering the tiles from first.
func (c *Client) AddTilesFrom(tb testing.TB, flightID string, first, n, size int, seed int64) []tilestore.Tile {
	tb.Helper()
	rng := rand.New(rand.NewSource(seed))
	tiles := make([]tilestore.Tile, 0, n)
	for i := first; i < first+n; i++ {
		data := PNG(rng, size+rng.Intn(size/8+1))
		tiles = append(tiles, c.tile(tb, flightID, i, data))
	}
	if err := c.Blobs.Sync(); err != nil {
		tb.Fatalf("providertest: sync blobs: %v", err)
	}
	if _, err := c.Store.InsertTiles(context.Background(), tiles); err != nil {
		tb.Fatalf("providertest: insert tiles: %v", err)
	}
	return tiles
}

func (c *Client) tile(tb testing.TB, flightID string, i int, data []byte) tilestore.Tile {
	tb.Helper()
	id := fmt.Sprintf("%s-%06d", flightID, i)
	rel := fmt.Sprintf("%s/%03d/%s.png", flightID, i/1000, id)
	size, sum, err := c.Blobs.PutDeferred(rel, bytes.NewReader(data))
	if err != nil {
		tb.Fatalf("providertest: put blob: %v", err)
	}
	return tilestore.Tile{
		ID: id, FlightID: flightID, Z: 17, X: int64(i % 100000), Y: int64(43079 + i/100000), ContentType: "image/png",
		SizeBytes: size, SHA256: sum, BlobPath: rel,
		CapturedAt:   time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second),
		VotingStatus: tilestore.StatusTrusted,
	}
}

// SHA256 is the hex sha256 of b.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Counts returns the flight's tiles per status.
func (c *Client) Counts(tb testing.TB, flightID string) map[tilestore.VotingStatus]int64 {
	tb.Helper()
	fc, err := c.Store.FlightCounts(context.Background(), flightID)
	if err != nil {
		tb.Fatalf("providertest: flight counts: %v", err)
	}
	if len(fc) == 0 {
		return map[tilestore.VotingStatus]int64{}
	}
	return fc[0].ByStatus
}
