package upload

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
)

func TestABadBlobIsNamedLeftPendingWithNoAttemptAndNotRetried(t *testing.T) {
	r := newCmdRig(t)
	ids := r.seed("F1", tilestore.FlightOnGround, 5)
	p, err := r.blobs.Resolve("F1/18/2/7.png")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	res := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" })
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3", res.code, res.err)
	}
	if msg := res.err.Error(); !strings.Contains(msg, "tilectl tiles verify --flight F1") || !strings.Contains(msg, "tiles import --flight F1") {
		t.Errorf("exit message %q does not point to tiles verify and a re-import", msg)
	}
	m := decodeSummary(t, res.stdout)
	lfs, _ := m["local_failures"].([]any)
	if m["local_failed"] != 1.0 || len(lfs) != 1 {
		t.Fatalf("summary local_failed %v, local_failures %v; want the one tile", m["local_failed"], m["local_failures"])
	}
	lf := lfs[0].(map[string]any)
	if lf["flight_id"] != "F1" || lf["tile_id"] != ids[2] || lf["cache_path"] != p || lf["problem"] != "blob_missing" {
		t.Errorf("local failure %v, want tile %s at %s, blob_missing", lf, ids[2], p)
	}
	if m["rejected"] != 0.0 || m["uploaded"] != 4.0 || m["still_pending"] != 1.0 {
		t.Errorf("summary %v, want 4 uploaded, none rejected, 1 pending", m)
	}
	var size float64
	if err := r.store.Pool().QueryRow(context.Background(), `SELECT size_bytes FROM tiles WHERE tile_id = $1`, ids[2]).Scan(&size); err != nil {
		t.Fatal(err)
	}
	if m["still_pending_bytes"] != size {
		t.Errorf("still_pending_bytes %v, want the pending tile's %v", m["still_pending_bytes"], size)
	}
	if !strings.Contains(res.stderr, `"level":"warn"`) || !strings.Contains(res.stderr, ids[2]) || !strings.Contains(res.stderr, p) {
		t.Errorf("no WARN line naming the tile and its cache path:\n%s", res.stderr)
	}
	if len(r.clock.sleeps) != 0 {
		t.Errorf("the decorator slept %v: retrying cannot mend a blob", r.clock.sleeps)
	}
	var attempts, recorded int
	if err := r.store.Pool().QueryRow(context.Background(),
		`SELECT upload_attempts, (SELECT count(*) FROM upload_rejections) FROM tiles WHERE tile_id = $1`, ids[2]).Scan(&attempts, &recorded); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || recorded != 0 || r.status(ids[2]) != "pending" {
		t.Errorf("tile %s: %s, %d attempts, %d rejections recorded; want pending, 0, 0", ids[2], r.status(ids[2]), attempts, recorded)
	}
	// The text summary lists it too.
	res = r.run(func(o *Options) { o.FlightID = "F1" })
	if res.code != exitcode.Partial || !strings.Contains(res.stdout, ids[2]+"  blob_missing  "+p) {
		t.Errorf("text run: exit %d, stdout %q; want 3 and the tile listed", res.code, res.stdout)
	}
}
