package uploader_test

import (
	"testing"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// Like the retry decorator would, the uploader is run again until nothing
// is pending, with rejections counted between runs; every fault kind hits
// 30% of batch requests.
func TestUploadUnderFaultsStoresEveryTileExactlyOnce(t *testing.T) {
	t.Parallel()
	const n = 500
	p := providertest.Start(t, func(c *provider.Config) {
		c.Faults = provider.FaultConfig{Rate: 0.3, Seed: 7, TransientRejectRate: 0.02}
	})
	c := providertest.NewClient(t, "fc")
	c.AddTiles(t, "fc", n, 1024, 2)
	u, _ := newUploader(t, p.URL, c, nil)

	var replayed, protocolErrors int
	for run := 1; ; run++ {
		if run > 15 {
			t.Fatalf("tiles still pending after %d runs: %v", run-1, c.Counts(t, "fc"))
		}
		rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fc", BatchSize: 8, Concurrency: 4})
		replayed += rep.Replayed
		for _, r := range rep.Rejections {
			if r.Reason == uploader.ReasonProtocolError {
				protocolErrors++
			}
		}
		if err != nil {
			t.Logf("run %d: %v", run, err)
		}
		if err == nil && rep.Pending == 0 {
			break
		}
		// A rejected tile is claimed again once its rejection is counted,
		// as the decorator counts between its calls.
		if _, err := c.Store.CountRejectionsUpTo(testCtx(t), "fc", 100, 0, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	l := allUploadedOnce(t, c, p, "fc", n)
	for _, op := range l.Ops {
		if op.Fingerprints != 1 {
			t.Errorf("op %s arrived with %d fingerprints", op.OpID, op.Fingerprints)
		}
	}
	for _, k := range provider.AllFaultKinds {
		if l.Faults[k] == 0 {
			t.Errorf("fault %s was never injected; the test does not cover it", k)
		}
	}
	if replayed == 0 {
		t.Errorf("no answer was replayed, though answers were dropped and cut")
	}
	// An omitted result is settled by asking the provider: a tile it holds
	// is uploaded, one it does not is a protocol_error; either way each
	// tile is stored once (allUploadedOnce).
	t.Logf("faults %v, replayed %d, protocol errors %d", l.Faults, replayed, protocolErrors)
}
