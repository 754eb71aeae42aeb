package uploader_test

import (
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// A batch an earlier run left open that the provider stored, settled
// from the provider's record of it (a member's blob is gone, so it is not
// sent again), tells the progress its tiles' bytes, as a batch sent in
// the run does: the progress counts what is still to deliver from them.
func TestABatchSettledFromTheProvidersRecordTellsTheProgressItsBytes(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	d, hs := behindDroppedAnswers(t, p)
	c := providertest.NewClient(t, "fr")
	tiles := c.AddTiles(t, "fr", 2, 1024, 5)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) {
		o.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		o.MaxResends = 1
	})
	if _, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fr", BatchSize: 2, Concurrency: 1}); err != nil {
		t.Logf("first run: %v", err)
	}
	if n := len(openBatches(t, c, "fr")); n != 1 {
		t.Fatalf("first run left %d open batches, want 1", n)
	}
	_, pendingBytes, err := c.Store.PendingSummary(testCtx(t), "fr")
	if err != nil {
		t.Fatal(err)
	}
	path, err := c.Blobs.Resolve(tiles[1].BlobPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	d.on.Store(false)
	var mu sync.Mutex
	var told []uploader.BatchProgress
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fr", BatchSize: 2, Concurrency: 1,
		Progress: func(b uploader.BatchProgress) { mu.Lock(); told = append(told, b); mu.Unlock() }})
	if err != nil || rep.Pending != 0 {
		t.Fatalf("second run: %+v, %v; want the batch settled from the provider's record", rep, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || !told[0].Replayed || told[0].Uploaded != 2 || told[0].Bytes != pendingBytes {
		t.Fatalf("progress told %+v, want one replayed batch of 2 tiles and %d B", told, pendingBytes)
	}
}
