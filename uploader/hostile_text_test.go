package uploader_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// A provider's rejection text is stored with the batch's settlement.
// Postgres refuses invalid UTF-8 and NUL bytes: unless the client cleans
// them, such an answer could never be settled and would block the flight
// forever (each run resending, getting the same replay, failing again).
func TestHostileRejectionTextIsStoredCleanAndTheBatchSettles(t *testing.T) {
	t.Parallel()
	messages := map[string]string{
		"multi-byte cut": "a" + strings.Repeat("é", 150), // byte 200 falls inside a character
		"NUL byte":       "bad\x00byte",
		"invalid UTF-8":  "bad\xff\xfebytes",
		"echoed token":   "your token was " + providertest.Token,
	}
	for name, msg := range messages {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
				res := make([]map[string]string, len(b.TileIDs))
				for i, id := range b.TileIDs {
					res[i] = map[string]string{"tile_id": id, "status": "rejected", "reason": "decode\x00_error", "message": msg}
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"op_id": b.Key, "results": res})
			})
			c := providertest.NewClient(t, "fh")
			c.AddTiles(t, "fh", 2, 256, 9)
			u, _ := newUploader(t, hs.URL, c, nil)
			rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fh", Concurrency: 1})
			if err != nil {
				t.Fatalf("run failed: %v", err)
			}
			if rep.Rejected != 2 || len(openBatches(t, c, "fh")) != 0 {
				t.Fatalf("report %+v, open batches %d: want 2 rejections and the batch settled", rep, len(openBatches(t, c, "fh")))
			}
			rows, err := c.Store.Pool().Query(context.Background(), `SELECT reason, coalesce(message, '') FROM upload_rejections`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var reason, stored string
				if err := rows.Scan(&reason, &stored); err != nil {
					t.Fatal(err)
				}
				if strings.ContainsRune(stored, 0) || !utf8.ValidString(stored) || len(stored) > 210 {
					t.Errorf("stored message %q is not clean", stored)
				}
				if strings.Contains(stored, providertest.Token) {
					t.Errorf("stored message keeps the token: %q", stored)
				}
				if reason != "decode_error" {
					t.Errorf("stored reason %q, want decode_error (NUL removed)", reason)
				}
			}
		})
	}
}
