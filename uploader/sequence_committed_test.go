package uploader_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// Found by the chaos soak (SEED=4392084607449770639, round 10): a
// sequenced batch's answer was lost after the provider committed its
// number, the provider restarted (its cache of outcomes went with it), and
// the resend was answered ALREADY_COMMITTED. tilectl failed the batch and
// settled it by tile lookup, although the provider's operation record held
// the sealed answer: the poison tile that answer rejected was never
// counted, and was sent under a fourth key with a budget of three.
func TestAlreadyCommittedSettlesTheBatchUnderItsKeyFromTheProvidersSealedAnswer(t *testing.T) {
	t.Parallel()
	var seals atomic.Int32
	release := make(chan struct{})
	p, rec, url := strictProvider(t, func(c *provider.Config) {
		c.Faults.RejectTileIDs = []string{"sk-000001"}
		// The first batch is stored, rejected in part and committed, and
		// its answer held back past the client's request timeout: lost.
		c.AfterSeal = func(string) {
			if seals.Add(1) == 1 {
				<-release
			}
		}
	})
	t.Cleanup(func() { close(release) }) // before the servers close
	rec.forgetCommitted = true           // no outcome is replayed: ALREADY_COMMITTED
	c := providertest.NewClient(t, "sk")
	c.AddTiles(t, "sk", 6, 256, 3)
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) {
		o.ClientID = "drone-7"
		o.RequestTimeout = time.Second
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sk", BatchSize: 3, MaxAttempts: 1})
	if err != nil || rep.Uploaded() != 5 {
		t.Fatalf("run: %+v, %v; want 5 uploaded", rep, err)
	}
	// The first send is still held (its answer lost): the recorder has
	// its resends and the batches after it.
	reqs := rec.all()
	if len(reqs) < 1 || reqs[0].Seq != 1 || reqs[0].Code != operation.CodeAlreadyCommitted {
		t.Fatalf("want the first batch resent under its key with number 1 and answered ALREADY_COMMITTED: %+v", reqs)
	}
	first := reqs[0].Key
	var state string
	if err := c.Store.Pool().QueryRow(testCtx(t), `SELECT state FROM upload_batches WHERE op_id = $1`, first).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "settled" {
		t.Errorf("batch %s is %q, want settled from the provider's sealed answer", first, state)
	}
	rows, err := c.Store.Pool().Query(testCtx(t), `SELECT op_id FROM upload_rejections WHERE tile_id = 'sk-000001'`)
	if err != nil {
		t.Fatal(err)
	}
	var rejectedUnder []string
	for rows.Next() {
		var op string
		if err := rows.Scan(&op); err != nil {
			t.Fatal(err)
		}
		rejectedUnder = append(rejectedUnder, op)
	}
	if rows.Err() != nil || len(rejectedUnder) != 1 || rejectedUnder[0] != first {
		t.Errorf("poison tile rejected under %v (%v); want once, under %s, as the provider's sealed answer said: "+
			"at its budget of 1 it must not travel under another key", rejectedUnder, rows.Err(), first)
	}
	for _, r := range reqs[1:] {
		if r.Key == first {
			t.Errorf("the first batch was sent again after ALREADY_COMMITTED: %+v", reqs)
		}
	}
	if got, last := localLast(t, c, url, "drone-7"), serverLast(t, p, "drone-7"); got != 2 || last != 2 {
		t.Errorf("last committed: client %d, provider %d; want 2 and 2", got, last)
	}
	storedOnce(t, p, 5)
}
