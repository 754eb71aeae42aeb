package scaleout_test

import (
	"context"
	"testing"
	"time"
)

// shareScenario: 3 processes start at once on a 1,500-tile flight; one is
// SIGKILLed after a second; the other two (on the same machine, whose run
// lock files prove the killed one dead) adopt what it held under its keys
// without waiting for its lease, and exit 0 with the flight done, each
// having uploaded a share; every tile is stored exactly once.
func shareScenario(t *testing.T, r *rig) {
	const lease = 3 * time.Second
	flags := []string{"--batch-size", "20", "--concurrency", "2", "--lease", lease.String()}
	procs := []*proc{r.start(flags...), r.start(flags...), r.start(flags...)}
	victim := procs[2]
	victimPID := victim.cmd.Process.Pid
	// Killed after a second, at a moment it holds a batch: on a loaded
	// machine a process may not have claimed one yet after a second.
	killAt, giveUp := time.Now().Add(time.Second), time.Now().Add(60*time.Second)
	for {
		if time.Now().After(killAt) && r.holds(t, victimPID) {
			break
		}
		if time.Now().After(giveUp) {
			t.Fatalf("process %d never held an open batch in 60s: %v", victimPID, r.counts())
		}
		time.Sleep(5 * time.Millisecond)
	}
	victim.kill(t)

	// The killed run's batches are still its own: open, under its lease.
	ls, err := r.store.Leases(context.Background(), r.flight)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, l := range ls {
		if l.PID == victimPID {
			held += l.Tiles
		}
	}
	if held == 0 {
		t.Fatalf("the killed process held no open batch by the time it died (leases %+v): the test would prove nothing", ls)
	}

	for i, p := range procs[:2] {
		code, sum := p.wait(t)
		if code != 0 {
			t.Fatalf("process %d exited %d, want 0; summary %v\nstderr:\n%s", i, code, sum, p.errb.String())
		}
		if up := flightOf(t, sum)["uploaded"].(float64); up <= 0 {
			t.Errorf("process %d uploaded %v tiles, want a share", i, up)
		}
	}

	// Exit 0 means the flight is done: nothing is left for another run.
	if c := r.counts(); c["uploaded"] != len(r.ids) {
		t.Fatalf("statuses %v, want all %d uploaded", c, len(r.ids))
	}
	stores := r.prov.Stores()
	for _, id := range r.ids {
		if stores[id] != 1 {
			t.Errorf("tile %s stored %d times, want exactly once", id, stores[id])
		}
	}
	if len(stores) != len(r.ids) {
		t.Errorf("provider stored %d distinct tiles, want %d", len(stores), len(r.ids))
	}
	var open int
	if err := r.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM upload_batches WHERE state = 'open'`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 0 {
		t.Errorf("%d batches still open", open)
	}
}

func TestThreeProcessesShareAFlightAndAKilledOnesBatchesAreFinishedOnceItsLeaseEnds(t *testing.T) {
	t.Parallel()
	r := newRig(t, "SH", 1500, 150*time.Millisecond, nil)
	shareScenario(t, r)
}

func TestThreeProcessesShareAFlightThroughPgBouncerInTransactionPoolingMode(t *testing.T) {
	t.Parallel()
	r := newRig(t, "PB", 1500, 150*time.Millisecond, nil)
	r.dbURL = throughPgBouncer(t, r.dbURL)
	shareScenario(t, r)
}
