package tilestore_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

func TestARunLockIsAliveWhileHeldDeadWhenItsFileIsFreeAndUnknownWithoutAFile(t *testing.T) {
	t.Parallel()
	locks := tilestore.NewRunLocks(t.TempDir())
	held, err := locks.Hold("run-a")
	if err != nil {
		t.Fatal(err)
	}
	// flock belongs to an open file description: another open of the file,
	// in this process or any other, cannot take it while it is held.
	if st, err := locks.State("run-a"); err != nil || st != tilestore.RunAlive {
		t.Fatalf("held lock: %v (%v), want alive", st, err)
	}
	if st, _ := locks.State("run-never"); st != tilestore.RunUnknown {
		t.Fatalf("no lock file: %v, want unknown", st)
	}
	// A run that died leaves its file with the lock free.
	if err := os.WriteFile(filepath.Join(locks.Dir(), "run-dead.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, _ := locks.State("run-dead"); st != tilestore.RunDead {
		t.Fatalf("free lock file: %v, want dead", st)
	}
	if n, err := locks.Prune(func(id string) bool { return id == "run-dead" }); err != nil || n != 0 {
		t.Fatalf("prune removed %d (%v), want none: the dead run is kept (it still holds batches)", n, err)
	}
	if n, err := locks.Prune(nil); err != nil || n != 1 {
		t.Fatalf("prune removed %d (%v), want the dead run's file only", n, err)
	}
	if st, _ := locks.State("run-a"); st != tilestore.RunAlive {
		t.Fatalf("prune touched a held lock: %v", st)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(locks.Dir(), "run-a.lock")); !os.IsNotExist(err) {
		t.Fatalf("a released lock's file is still there (%v)", err)
	}
	if _, err := locks.Hold("../escape"); err == nil {
		t.Fatal("a run ID with a path in it named a lock file")
	}
}

func TestOnlyAProvenDeadRunOfThisHostHasItsLiveLeasedBatchesAdopted(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	seedFlight(t, s, "FD", 6)
	ctx := testCtx(t)
	for _, r := range []tilestore.Run{
		{ID: "dead-here", Host: "ground-1", PID: 7, Lease: time.Hour},
		{ID: "dead-elsewhere", Host: "ground-2", PID: 7, Lease: time.Hour},
		{ID: "alive-here", Host: "ground-1", PID: 8, Lease: time.Hour},
	} {
		op := "op-" + r.ID
		if _, err := s.ForRun(r).ClaimBatch(ctx, tilestore.Claim{FlightID: "FD", Limit: 2, OpID: op, Pick: pickAll(op)}); err != nil {
			t.Fatal(err)
		}
	}
	me := s.ForRun(tilestore.Run{ID: "me", Host: "ground-1", PID: 9, Lease: time.Hour})
	// The host guard: a run ID proven dead on this machine names a run of
	// this machine; another host's batch under that ID is not adopted.
	bs, err := me.AdoptOpenBatches(ctx, "FD", []string{"dead-here", "dead-elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].OpID != "op-dead-here" {
		t.Fatalf("adopted %+v, want op-dead-here only", bs)
	}
	ls, err := me.Leases(ctx, "FD")
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, l := range ls {
		owners[l.RunID] = l.Tiles
	}
	if owners["me"] != 2 || owners["dead-here"] != 0 || owners["alive-here"] != 2 || owners["dead-elsewhere"] != 2 {
		t.Fatalf("owners after adoption: %v", owners)
	}
}
