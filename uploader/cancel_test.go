package uploader_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

func TestCancelStopsFormingBatchesAndSettlesThoseInFlight(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fq")
	c.AddTiles(t, "fq", 40, 512, 14)
	u, _ := newUploader(t, p.URL, c, nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fq", BatchSize: 4, Concurrency: 1,
		Progress: func(uploader.BatchProgress) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep.Outcome != uploader.OutcomeFailure || rep.Batches < 1 || rep.Pending == 0 || rep.Pending+rep.Uploaded() != 40 {
		t.Fatalf("report %+v; want a failure that settled what it sent and left the rest pending", rep)
	}
	if got := c.Counts(t, "fq")[tilestore.StatusUploaded]; int(got) != rep.Uploaded() {
		t.Fatalf("uploaded %d, report says %d", got, rep.Uploaded())
	}
	if open := openBatches(t, c, "fq"); len(open) != 0 {
		t.Fatalf("%d batches left open; in-flight batches should have finished", len(open))
	}
}

func TestDryRunSendsAndChangesNothing(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fy")
	c.AddTiles(t, "fy", 10, 512, 15)
	u, _ := newUploader(t, p.URL, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fy", BatchSize: 4, DryRun: true})
	if err != nil || rep.Batches != 3 || rep.Pending != 10 || rep.Bytes == 0 {
		t.Fatalf("dry run: %+v %v; want 3 batches, 10 pending", rep, err)
	}
	if len(p.Ledger(t).Tiles) != 0 || len(openBatches(t, c, "fy")) != 0 || c.Counts(t, "fy")[tilestore.StatusUploaded] != 0 {
		t.Fatalf("a dry run changed something")
	}
	n := 0
	for tl, err := range u.EnumeratePendingTiles(testCtx(t), "fy") {
		if err != nil || tl.FlightID != "fy" {
			t.Fatalf("enumerate: %v %+v", err, tl)
		}
		n++
	}
	if n != 10 {
		t.Fatalf("enumerated %d, want 10", n)
	}
}

func TestCancelWhileABatchIsAtTheProviderStillUsesItsAnswer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testCtx(t))
	var once sync.Once
	p := providertest.Start(t, func(c *provider.Config) {
		c.BeforeRun = func(string) { once.Do(cancel) }
	})
	c := providertest.NewClient(t, "fo")
	c.AddTiles(t, "fo", 12, 512, 17)
	u, _ := newUploader(t, p.URL, c, nil)
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fo", BatchSize: 4, Concurrency: 1})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep.Accepted != 4 || rep.Batches != 1 {
		t.Fatalf("report %+v; want the in-flight batch of 4 settled", rep)
	}
	if got := c.Counts(t, "fo")[tilestore.StatusUploaded]; got != 4 {
		t.Fatalf("uploaded %d, want 4", got)
	}
	if open := openBatches(t, c, "fo"); len(open) != 0 {
		t.Fatalf("%d batches left open", len(open))
	}
}
