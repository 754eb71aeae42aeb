package uploader_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// An open batch whose answer was lost, settled after the reference
// provider's retention has passed and its GC has collected the record: the
// provider answers 422 IDEMPOTENCY_EXPIRED (it never runs the key as new),
// the client fails that batch and gets its tiles to the provider under a
// new key without storing any of them twice (docs/provider-api.md). Real time,
// real HTTP: retention is 2 s, so the test takes about 5 s.
func TestExpiredKeyAfterProviderGCIsSettledWithoutStoringTwice(t *testing.T) {
	t.Parallel()
	var losing atomic.Bool
	losing.Store(true)
	release := make(chan struct{})
	p := providertest.Start(t, func(c *provider.Config) {
		c.Retention = 2 * time.Second
		c.GCEvery = 50 * time.Millisecond
		// While losing, every answer is held back past the client's
		// request timeout: the batch is stored and sealed, its answer lost.
		c.AfterSeal = func(string) {
			if losing.Load() {
				<-release
			}
		}
	})
	c := providertest.NewClient(t, "fx")
	c.AddTiles(t, "fx", 3, 256, 21)
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.RequestTimeout = 300 * time.Millisecond })

	ctx1, cancel1 := context.WithTimeout(testCtx(t), 2*time.Second)
	defer cancel1()
	_, err := u.UploadPendingTiles(ctx1, uploader.Request{FlightID: "fx", Concurrency: 1})
	losing.Store(false)
	close(release)
	open := openBatches(t, c, "fx")
	if len(open) != 1 {
		t.Fatalf("first run (%v) left %d open batches, want 1", err, len(open))
	}
	oldKey := open[0].OpID

	// The record expires 2 s after sealing and is collected 2 s later.
	p.WaitForNoOperationRecords(t, 20*time.Second)

	u, _ = newUploader(t, p.URL, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fx", Concurrency: 1})
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if counts := c.Counts(t, "fx"); counts["uploaded"] != 3 || rep.Pending != 0 {
		t.Fatalf("second run: counts %v report %+v, want all 3 uploaded", counts, rep)
	}
	var state string
	var status *int
	if err := c.Store.Pool().QueryRow(context.Background(),
		`SELECT state, http_status FROM upload_batches WHERE op_id = $1`, oldKey).Scan(&state, &status); err != nil {
		t.Fatal(err)
	}
	if state != "failed" || status == nil || *status != http.StatusUnprocessableEntity {
		t.Fatalf("the expired batch ended %s/%v, want failed with 422", state, status)
	}
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/v1/operations/"+oldKey, nil)
	req.Header.Set("Authorization", "Bearer "+providertest.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st operation.StateResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.State != "expired" {
		t.Fatalf("provider state of the old key: %+v (%v), want expired", st, err)
	}
	for _, tl := range p.Ledger(t).Tiles {
		if tl.Writes != 1 {
			t.Fatalf("tile %s written %d times", tl.TileID, tl.Writes)
		}
	}
}
