package tiles

import (
	"os"
	"testing"

	"github.com/tilectl/tilectl/uploader"
)

// A crash after a page's findings were appended but before the checkpoint
// that counts them was written leaves findings the checkpoint does not
// know: the next load cuts them off, so the page is checked and recorded
// once.
func TestACheckpointDropsFindingsAppendedAfterIt(t *testing.T) {
	t.Parallel()
	cps := newCheckpointDir(t.TempDir(), "CP-1")
	cp := reconcileCheckpoint{FlightID: "CP-1"}
	first := []ReconcileFinding{{TileID: "CP-1-10-1-7", Verdict: uploader.Lacks}}
	cp.After, cp.Checked = "CP-1-10-1-7", 1000
	if err := cps.save(&cp, first); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(cps.findingsPath(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"tile_id":"CP-1-10-2000-7","verdict":"lacks"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()

	got, findings, ok, err := cps.load()
	if err != nil || !ok {
		t.Fatalf("load = %v, %v", ok, err)
	}
	if got.After != cp.After || got.Checked != 1000 || len(findings) != 1 || findings[0].TileID != "CP-1-10-1-7" {
		t.Fatalf("load = %+v with findings %+v; want the checkpoint and only the finding it counts", got, findings)
	}
	// The next page appends after the cut.
	second := []ReconcileFinding{{TileID: "CP-1-10-1500-7", Verdict: uploader.HoldsOther}}
	if err := cps.save(&got, second); err != nil {
		t.Fatal(err)
	}
	if _, findings, _, _ = cps.load(); len(findings) != 2 || findings[1].TileID != "CP-1-10-1500-7" {
		t.Fatalf("after the next page: %+v", findings)
	}
	if err := cps.remove(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := cps.load(); ok || err != nil {
		t.Fatalf("after remove: ok %v, err %v; want no checkpoint", ok, err)
	}
}
