package uploader_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

func TestMissingAndCorruptBlobsAreRejectedLocallyAndNotSent(t *testing.T) {
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
	reasons := map[string]string{}
	for _, r := range rep.Rejections {
		reasons[r.TileID] = r.Reason
		if r.OpID == "" {
			t.Errorf("local rejection of %s has no op id", r.TileID)
		}
	}
	want := map[string]string{missing.ID: uploader.ReasonBlobMissing, corrupt.ID: uploader.ReasonBlobCorrupt, resized.ID: uploader.ReasonBlobCorrupt}
	if len(reasons) != 3 {
		t.Fatalf("rejections %v, want %v", reasons, want)
	}
	for id, r := range want {
		if reasons[id] != r {
			t.Errorf("tile %s: %q, want %q", id, reasons[id], r)
		}
	}
	if rep.Accepted != 3 || rep.Outcome != uploader.OutcomePartial {
		t.Fatalf("report %+v, want 3 accepted, partial", rep)
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
	// The rejections are recorded for the decorator to count.
	cr, err := c.Store.CountRejections(testCtx(t), "fb", 5, nil)
	if err != nil || cr.Counted != 3 {
		t.Fatalf("CountRejections = %+v, %v; want 3 counted", cr, err)
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
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.HTTPOptions) {
		o.MaxResponseBytes = 256 << 10
		o.MaxResends = 2
	})
	start := time.Now()
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fz"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Uploaded() != 0 || rep.Rejected != 2 || rep.Rejections[0].Reason != uploader.ReasonProtocolError {
		t.Fatalf("report %+v; want both tiles protocol_error", rep)
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
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.HTTPOptions) {
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
	u, _ := newUploader(t, p.URL, c, func(o *uploader.HTTPOptions) {
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
