package uploader_test

import (
	"sync/atomic"
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

func TestUploadStoresEveryTileOnceAndMarksItUploaded(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "f1")
	c.AddTiles(t, "f1", 50, 2048, 1)
	u, _ := newUploader(t, p.URL, c, nil)

	var progress atomic.Int32
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "f1", BatchSize: 8, Concurrency: 3,
		Progress: func(uploader.BatchProgress) { progress.Add(1) }})
	if err != nil {
		t.Fatalf("UploadPendingTiles: %v", err)
	}
	if rep.Accepted != 50 || rep.Outcome != uploader.OutcomeSuccess || rep.Pending != 0 || rep.Batches != 7 {
		t.Fatalf("report = %+v, want 50 accepted in 7 batches, success, none pending", rep)
	}
	allUploadedOnce(t, c, p, "f1", 50)
	if progress.Load() != 7 {
		t.Errorf("progress called %d times, want 7", progress.Load())
	}
	// A second run finds nothing to do.
	rep, err = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "f1"})
	if err != nil || rep.Batches != 0 {
		t.Fatalf("second run: %+v, %v; want no batches", rep, err)
	}
}
