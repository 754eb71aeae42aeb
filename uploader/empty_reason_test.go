package uploader_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// Issue 9 item 3: a rejection whose reason cleans to nothing ("\u0000",
// blanks) is valid JSON. The reason is cleaned first and the
// default applied after, so the batch settles: the accepted tile is
// uploaded and the rejection is recorded, instead of every run replaying an
// answer that can never be stored.
func TestRejectionReasonThatCleansToNothingStillSettlesTheBatch(t *testing.T) {
	t.Parallel()
	for name, reason := range map[string]string{"NUL": `"\u0000"`, "NUL and spaces": `"\u0000 \t\u0000"`, "empty": `""`} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"op_id":"` + b.Key + `","results":[` +
					`{"tile_id":"` + b.TileIDs[0] + `","status":"rejected","reason":` + reason + `},` +
					`{"tile_id":"` + b.TileIDs[1] + `","status":"accepted"}]}`))
			})
			c := providertest.NewClient(t, "fn")
			tiles := c.AddTiles(t, "fn", 2, 256, 3)
			u, _ := newUploader(t, hs.URL, c, nil)
			rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fn", Concurrency: 1})
			if err != nil {
				t.Fatalf("run failed: %v", err)
			}
			if rep.Accepted != 1 || rep.Rejected != 1 || len(openBatches(t, c, "fn")) != 0 {
				t.Fatalf("report %+v, %d open batches: want 1 accepted, 1 rejected, the batch settled", rep, len(openBatches(t, c, "fn")))
			}
			if got := c.Counts(t, "fn")[tilestore.StatusUploaded]; got != 1 {
				t.Errorf("%d tiles uploaded, want the accepted one", got)
			}
			var stored string
			if err := c.Store.Pool().QueryRow(context.Background(),
				`SELECT reason FROM upload_rejections WHERE tile_id = $1`, tiles[0].ID).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if stored != "rejected" {
				t.Errorf("stored reason %q, want the default %q", stored, "rejected")
			}
		})
	}
}
