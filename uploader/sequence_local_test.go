package uploader_test

import (
	"os"
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

func TestABatchWhoseBlobsAllFailTheLocalCheckConsumesNoNumber(t *testing.T) {
	t.Parallel()
	p, rec, url := strictProvider(t, nil)
	c := providertest.NewClient(t, "hb")
	tiles := c.AddTiles(t, "hb", 4, 256, 28)
	// The first batch's two tiles have other bytes on disk than their
	// sha256 says (same size: the pre-flight passes, the read before
	// sending does not): the batch is journaled with number 1 and then
	// left with no member, unsent.
	for _, tl := range tiles[:2] {
		path, err := c.Blobs.Resolve(tl.BlobPath)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-1] ^= 0xff
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := newUploader(t, url, c, withClientID("drone-7"))
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "hb", BatchSize: 2})
	if err != nil || rep.LocalFailed != 2 || rep.Uploaded() != 2 {
		t.Fatalf("run: %+v, %v; want 2 local failures and 2 uploaded", rep, err)
	}
	var failed []int64
	rows, err := c.Store.Pool().Query(testCtx(t), `SELECT client_seq FROM upload_batches WHERE state = 'failed'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		failed = append(failed, n)
	}
	if rows.Err() != nil || len(failed) != 1 || failed[0] != 1 {
		t.Fatalf("failed batches' numbers %v (%v), want the emptied batch's 1", failed, rows.Err())
	}
	reqs := rec.all()
	if len(reqs) != 1 || reqs[0].Seq != 1 || reqs[0].Status != 200 {
		t.Fatalf("requests %+v: want one batch, number 1 again, answered 200", reqs)
	}
	if last := committedNumbersAreContiguous(t, p, rec, "drone-7"); last != 1 {
		t.Errorf("provider's last committed %d, want 1", last)
	}
	if got := localLast(t, c, url, "drone-7"); got != 1 {
		t.Errorf("client's last committed %d, want 1", got)
	}
}
