package uploader_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// sleeps records the waits the uploader asked for, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

func newUploader(t testing.TB, baseURL string, c *providertest.Client, edit func(*uploader.ClientOptions)) (*uploader.Client, *sleeps) {
	t.Helper()
	sl := &sleeps{}
	opts := uploader.ClientOptions{
		BaseURL: baseURL, Token: providertest.Token, Store: c.Store, Blobs: c.Blobs,
		Logger: zerolog.Nop(), Sleep: sl.Sleep, RequestTimeout: 10 * time.Second,
	}
	if edit != nil {
		edit(&opts)
	}
	u, err := uploader.NewClient(opts)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return u, sl
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// allUploadedOnce fails the test unless the flight's n tiles are uploaded
// and the provider holds n tiles, each written once. It returns the
// provider's ledger for further checks.
func allUploadedOnce(t *testing.T, c *providertest.Client, p *providertest.Provider, flight string, n int) provider.Ledger {
	t.Helper()
	if got := c.Counts(t, flight)[tilestore.StatusUploaded]; got != int64(n) {
		t.Fatalf("uploaded = %d, want %d", got, n)
	}
	return storedOnce(t, p, n)
}

// storedOnce checks the provider holds n tiles, each written once, and
// returns its ledger.
func storedOnce(t *testing.T, p *providertest.Provider, n int) provider.Ledger {
	t.Helper()
	l := p.Ledger(t)
	if len(l.Tiles) != n {
		t.Fatalf("provider holds %d tiles, want %d", len(l.Tiles), n)
	}
	for _, tl := range l.Tiles {
		if tl.Writes != 1 {
			t.Errorf("tile %s written %d times", tl.TileID, tl.Writes)
		}
	}
	return l
}

// pickAll is a tilestore.Claim.Pick that puts every candidate in one batch
// under op with fingerprint fp.
func pickAll(op, fp string) func([]tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
	return func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
		b := tilestore.Batch{OpID: op, Fingerprint: fp}
		for _, tl := range cands {
			b.TileIDs, b.SHA256s = append(b.TileIDs, tl.ID), append(b.SHA256s, tl.SHA256)
		}
		return b, nil
	}
}

// pickAsUploader is pickAll with the flight and the fingerprint the
// uploader itself gives a batch, for a batch a run resends as its own.
func pickAsUploader(op, flight string) func([]tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
	return func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
		b, _ := pickAll(op, "")(cands)
		b.FlightID, b.Fingerprint = flight, uploader.Fingerprint(flight, b.TileIDs, b.SHA256s)
		return b, nil
	}
}
