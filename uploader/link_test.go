package uploader_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/linkemu"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// linkRun uploads tiles 16 KiB tiles through an emulated link of mbit
// Mbit/s each way and rtt round trip to a provider taking batchTiles per
// batch, with concurrency (0: auto), and returns the share of the link's
// upstream capacity the tile bytes used.
func linkRun(t *testing.T, mbit int64, rtt time.Duration, batchTiles, tiles, concurrency int) (share float64, rep uploader.Report) {
	t.Helper()
	p := providertest.Start(t, func(c *provider.Config) { c.Limits.MaxBatchTiles = batchTiles })
	l, err := linkemu.New(linkemu.Config{UpRate: mbit * 1e6, DownRate: mbit * 1e6, Delay: rtt / 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	px, err := l.Listen(strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	flight := "fl"
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, tiles, 16<<10, 1)
	u, _ := newUploader(t, px.URL(), c, func(o *uploader.ClientOptions) { o.RequestTimeout = time.Minute })
	start := time.Now()
	rep, err = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: flight, Concurrency: concurrency})
	elapsed := time.Since(start)
	if err != nil || rep.Accepted != tiles {
		t.Fatalf("concurrency %d: accepted %d of %d, %v", concurrency, rep.Accepted, tiles, err)
	}
	share = float64(rep.Bytes) / (elapsed.Seconds() * float64(mbit) * 1e6 / 8)
	t.Logf("%d Mbit/s, %s, %d-tile batches, %d tiles, concurrency %d: %.2fs, %.2f of the link, limit at the end %d",
		mbit, rtt, batchTiles, tiles, concurrency, elapsed.Seconds(), share, rep.Concurrency)
	return share, rep
}

// The case the fixed default of 4 batches in flight left 13% of: a long fat
// link and small batches.
func TestAutoConcurrencyFillsAnEmulatedLongFatLinkWhereAFixedFourDoesNot(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 48 MiB through an emulated 100 Mbit/s link")
	}
	fixed, _ := linkRun(t, 100, 200*time.Millisecond, 8, 1500, 4)
	auto, rep := linkRun(t, 100, 200*time.Millisecond, 8, 1500, 0)
	// The share a run reaches here depends on the machine too (the
	// provider, the database and the race detector share its CPU, and
	// when it is busy they, not the link, cap auto's run): the test asks for
	// what the limit alone decides, that auto finds the room a fixed 4
	// leaves, by a margin no run at 4 in flight comes near.
	if auto < 1.5*fixed {
		t.Errorf("auto used %.2f of the link, fixed 4 %.2f: want at least 1.5 times", auto, fixed)
	}
	if rep.Concurrency <= 8 {
		t.Errorf("auto's limit at the end = %d, want it grown past its start of 8 on a link that holds about 19 batches", rep.Concurrency)
	}
}
