package uploader_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

func TestBadBlobsAreLocalFailuresThatAreNotSentNotCountedAndStayPending(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fb")
	tiles := c.AddTiles(t, "fb", 6, 1024, 9)
	missing, corrupt, resized := tiles[1], tiles[3], tiles[4]
	mustPath := func(tl tilestore.Tile) string {
		p, err := c.Blobs.Resolve(tl.BlobPath)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.Remove(mustPath(missing)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(mustPath(corrupt))
	b[len(b)-1] ^= 0xff // same size, other bytes
	if err := os.WriteFile(mustPath(corrupt), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mustPath(resized), b[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := newUploader(t, p.URL, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fb"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{missing.ID: uploader.ProblemBlobMissing, corrupt.ID: uploader.ProblemBlobWrongHash,
		resized.ID: uploader.ProblemBlobWrongSize}
	got := map[string]string{}
	for _, lf := range rep.LocalFailures {
		got[lf.TileID] = lf.Problem
		if lf.CachePath != mustPath(tileByID(tiles, lf.TileID)) {
			t.Errorf("tile %s: cache path %q is not the blob's path on disk", lf.TileID, lf.CachePath)
		}
	}
	if len(got) != 3 || rep.LocalFailed != 3 {
		t.Fatalf("local failures %v (%d), want %v", got, rep.LocalFailed, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("tile %s: %q, want %q", id, got[id], w)
		}
	}
	if rep.Accepted != 3 || rep.Rejected != 0 || len(rep.Rejections) != 0 || rep.Outcome != uploader.OutcomePartial {
		t.Fatalf("report %+v, want 3 accepted, no rejection, partial", rep)
	}
	held := map[string]bool{}
	for _, tl := range p.Ledger(t).Tiles {
		held[tl.TileID] = true
	}
	for id := range want {
		if held[id] {
			t.Errorf("tile %s was sent though its blob is bad", id)
		}
	}
	// Nothing is recorded for the decorator to count: the provider never
	// saw these tiles, so they keep their whole budget and stay pending.
	cr, err := c.Store.CountRejectionsUpTo(testCtx(t), "fb", 1, 0, "", nil)
	if err != nil || cr.Counted != 0 || len(cr.GaveUp) != 0 {
		t.Fatalf("CountRejectionsUpTo = %+v, %v; want nothing to count", cr, err)
	}
	if n, _, err := c.Store.PendingSummary(testCtx(t), "fb"); err != nil || n != 3 {
		t.Fatalf("pending = %d, %v; want the 3 bad-blob tiles", n, err)
	}
}

func tileByID(tiles []tilestore.Tile, id string) tilestore.Tile {
	for _, t := range tiles {
		if t.ID == id {
			return t
		}
	}
	return tilestore.Tile{}
}

func TestNoBlobOfTheFirstPageInTheCacheStopsTheRunBeforeAnythingIsSent(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	c := providertest.NewClient(t, "fw")
	c.AddTiles(t, "fw", 4, 512, 21)
	wrong, err := tilestore.NewBlobStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
			o.Blobs = wrong
			o.CacheDirSource = "environment TILECTL_CACHE_DIR"
		})
		_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fw", DryRun: dry})
		var bce *uploader.BlobCacheError
		if !errors.As(err, &bce) || bce.CacheDir != wrong.Root() || bce.Checked != 4 ||
			!strings.Contains(err.Error(), wrong.Root()) || !strings.Contains(err.Error(), "environment TILECTL_CACHE_DIR") {
			t.Fatalf("dry run %v: err = %v; want a BlobCacheError naming %s and where it came from", dry, err, wrong.Root())
		}
	}
	if n := len(f.received()); n != 0 {
		t.Fatalf("%d batches reached the provider", n)
	}
	if n, _, _ := c.Store.PendingSummary(testCtx(t), "fw"); n != 4 {
		t.Fatalf("pending = %d, want 4", n)
	}
}

// The pre-flight check looks at the whole first page: when none of its
// blobs is there every tile checked is counted, and one blob behind the
// first few shows that the cache dir is right.
func TestThePreflightLooksAtTheWholeFirstPageBeforeItStopsARun(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	c := providertest.NewClient(t, "fp")
	tiles := c.AddTiles(t, "fp", 40, 256, 23)
	keep := tiles[29]
	p, err := c.Blobs.Resolve(keep.BlobPath)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// Every blob gone, and the flight's top directory with them.
	top, _, _ := strings.Cut(keep.BlobPath, "/")
	if err := os.RemoveAll(filepath.Join(c.Blobs.Root(), top)); err != nil {
		t.Fatal(err)
	}
	u, _ := newUploader(t, hs.URL, c, nil)
	_, err = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fp", DryRun: true})
	var bce *uploader.BlobCacheError
	if !errors.As(err, &bce) || bce.Checked != 40 {
		t.Fatalf("no blob of 40: err = %v; want a BlobCacheError that checked all 40", err)
	}
	// The 30th blob back: the cache dir is the right one. The blob alone
	// must say so: the source hides its root, so the flight's top
	// directory, made again by the Put, cannot.
	if _, _, err := c.Blobs.Put(keep.BlobPath, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	u, _ = newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Blobs = struct{ uploader.BlobSource }{c.Blobs} })
	if _, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fp", DryRun: true}); errors.As(err, &bce) {
		t.Fatalf("with the 30th blob there: %v; want the run to go on", err)
	}
}

func TestDryRunReportsBlobProblemsInsteadOfWouldSend(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	c := providertest.NewClient(t, "fd")
	tiles := c.AddTiles(t, "fd", 3, 512, 22)
	p, _ := c.Blobs.Resolve(tiles[2].BlobPath)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	u, _ := newUploader(t, hs.URL, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pending != 2 || rep.LocalFailed != 1 || rep.LocalFailures[0].TileID != tiles[2].ID ||
		rep.LocalFailures[0].Problem != uploader.ProblemBlobMissing || rep.LocalFailures[0].CachePath != p {
		t.Fatalf("dry run report %+v; want 2 to send and the missing blob named", rep)
	}
}

func TestFlightStateIsConfirmedBeforeUploading(t *testing.T) {
	t.Parallel()
	c := providertest.NewClient(t, "fa")
	if _, err := c.Store.UpsertFlight(testCtx(t), "fa", tilestore.FlightAirborne); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer hs.Close()
	u, _ := newUploader(t, hs.URL, c, nil)
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fa"})
	var ng *uploader.FlightStateNotOnGroundError
	if !errors.As(err, &ng) || !errors.Is(err, uploader.ErrFlightNotOnGround) || ng.State != tilestore.FlightAirborne {
		t.Fatalf("err = %v, want FlightStateNotOnGroundError(airborne)", err)
	}
	if err := u.ConfirmFlightState(testCtx(t), "nope"); !errors.Is(err, tilestore.ErrFlightNotFound) {
		t.Fatalf("unknown flight: err = %v, want ErrFlightNotFound", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the provider was contacted %d times", hits.Load())
	}
}

func TestRedirectToAnotherHostIsRefused(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("the token reached another host")
		}
	}))
	defer other.Close()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer hs.Close()
	c := providertest.NewClient(t, "fx")
	c.AddTiles(t, "fx", 1, 512, 10)
	u, _ := newUploader(t, hs.URL, c, nil)
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fx"})
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusTemporaryRedirect || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("err = %v, want a refused redirect", err)
	}
	if elsewhere.Load() != 0 {
		t.Fatalf("the redirect was followed")
	}
}

func TestEndlessAnswerBodyIsBounded(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		fmt.Fprintf(w, `{"op_id":%q,"results":[`, b.Key)
		chunk := []byte(strings.Repeat(`{"tile_id":"x","status":"accepted"},`, 1000))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	c := providertest.NewClient(t, "fz")
	c.AddTiles(t, "fz", 2, 512, 11)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.MaxResponseBytes = 256 << 10
		o.MaxResends = 2
	})
	start := time.Now()
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fz"})
	if err != nil {
		t.Fatal(err)
	}
	// An answer that cannot be read leaves the outcome unknown: nothing is
	// rejected, and the batch stays open for a resend under its key.
	if rep.Uploaded() != 0 || rep.Rejected != 0 || rep.Pending != 2 {
		t.Fatalf("report %+v; want nothing uploaded or rejected, both tiles pending", rep)
	}
	if n := len(openBatches(t, c, "fz")); n != 1 {
		t.Fatalf("%d open batches, want the batch kept open under its key", n)
	}
	if rep.Resends != 2 || time.Since(start) > 20*time.Second {
		t.Fatalf("resends %d in %v; want 2, quickly", rep.Resends, time.Since(start))
	}
}

func TestSlowDripAnswerTimesOut(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		w.WriteHeader(200)
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte(" ")); err != nil {
				return
			}
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	c := providertest.NewClient(t, "fs")
	c.AddTiles(t, "fs", 1, 512, 12)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.RequestTimeout = 300 * time.Millisecond
		o.MaxResends = 1
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fs"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Timeouts != 2 || rep.Uploaded() != 0 {
		t.Fatalf("report %+v; want 2 timeouts, nothing uploaded", rep)
	}
}

func TestTileOverMaxTileBytesIsRejectedLocally(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	c := providertest.NewClient(t, "fl")
	c.AddTiles(t, "fl", 2, 1024, 18)
	c2 := c.AddTilesFrom(t, "fl", 2, 1, 70000, 19) // over the fake's max_tile_bytes of 64 KiB
	u, _ := newUploader(t, hs.URL, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fl"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accepted != 2 || rep.Rejected != 1 || rep.Rejections[0].TileID != c2[0].ID || rep.Rejections[0].Reason != "too_large" {
		t.Fatalf("report %+v; want the big tile rejected too_large", rep)
	}
	for _, b := range f.received() {
		for _, id := range b.TileIDs {
			if id == c2[0].ID {
				t.Fatalf("the too-large tile was sent")
			}
		}
	}
}

// emfileBlobs fails to open one tile's blob with EMFILE, as a machine out
// of file descriptors would.
type emfileBlobs struct {
	uploader.BlobSource
	path string
}

func (b emfileBlobs) Open(rel string) (*os.File, error) {
	if rel == b.path {
		return nil, &os.PathError{Op: "open", Path: rel, Err: syscall.EMFILE}
	}
	return b.BlobSource.Open(rel)
}

func TestABlobThisMachineCannotOpenStopsTheRunWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fm")
	tiles := c.AddTiles(t, "fm", 3, 512, 2)
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) {
		o.Blobs = emfileBlobs{BlobSource: c.Blobs, path: tiles[0].BlobPath}
	})
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fm", Concurrency: 1})
	if err == nil || !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "not counted as rejected") {
		t.Fatalf("err = %v, want the EMFILE, saying the tile was not counted", err)
	}
	var n int
	if err := c.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM upload_rejections`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rejections recorded for a local problem, want 0", n)
	}
}

// A dry run forms its batches as a run's claims do: pick among the next
// batch-size pending tiles, so a tile rejected as too large leaves its
// claim's batch one tile short, and the dry run says so.
func TestDryRunCountsTheBatchesARealRunSends(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	c := providertest.NewClient(t, "fd")
	c.AddTiles(t, "fd", 3, 1024, 21)
	c.AddTilesFrom(t, "fd", 3, 1, 70000, 22) // over the fake's max_tile_bytes of 64 KiB
	c.AddTilesFrom(t, "fd", 4, 3, 1024, 23)
	u, _ := newUploader(t, hs.URL, c, nil)
	dry, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd", BatchSize: 2, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd", BatchSize: 2}); err != nil {
		t.Fatal(err)
	}
	if sent := len(f.received()); dry.Batches != sent || sent != 4 {
		t.Fatalf("dry run said %d batches, the run sent %d; want 4 each", dry.Batches, sent)
	}
}
