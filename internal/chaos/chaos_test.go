package chaos

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// testLog sends the soak's progress to t.Log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// coverage names the soak's checks that say a fault landed, not that an
// invariant held: on a loaded machine a short soak's runs may end before a
// fault comes, which is bad luck, not a defect.
var coverage = map[string]bool{
	"db-connection-broken-at-least-once":        true,
	"db-restarted-and-provider-crashed-mid-run": true,
}

// TestChaosShortKeepsEveryInvariant runs a two-round soak (about 40 tiles)
// with faults, SIGKILLs, a broken database connection, database restarts
// and provider crashes mid-batch, one of the two rounds with a client ID
// (strict client sequencing), and fails on any violation (the per-tile
// budget and the sequencing invariants among them). When every fault did not land
// mid-run (timing: a quick run is over before it comes), it runs another
// two-round soak with the next seed, up to three, and fails when none of
// them had every fault land. SEED=n repeats a failing run.
func TestChaosShortKeepsEveryInvariant(t *testing.T) {
	seed := uint64(20261121)
	if s, err := strconv.ParseUint(os.Getenv("SEED"), 10, 64); err == nil && s != 0 {
		seed = s
	}
	tc, tp := testbin.Tilectl(t), testbin.Tileprovider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for try := range 3 {
		seed := seed + uint64(try)
		rep, err := Run(ctx, Config{Seed: seed, Rounds: 2, Tiles: 20, FaultRate: 0.4, TilectlBin: tc, ProviderBin: tp,
			WorkDir: t.TempDir(), Log: testLog{t}})
		if err != nil {
			t.Fatalf("soak (SEED=%d): %v", seed, err)
		}
		var table strings.Builder
		_ = rep.WriteTable(&table)
		t.Log("\n" + table.String())
		var missed []string
		for _, v := range rep.Violations {
			name, _, _ := strings.Cut(v, ":")
			if coverage[name] {
				missed = append(missed, v)
				continue
			}
			t.Errorf("SEED=%d: %s", seed, v)
		}
		if rep.SequencedRounds == 0 {
			t.Errorf("SEED=%d: no round ran with a client ID; the soak tested no strict sequencing", seed)
		}
		if rep.Kills == 0 {
			t.Errorf("SEED=%d: no run was SIGKILLed; the soak tested no crash", seed)
		}
		faults := 0
		for _, n := range rep.Faults {
			faults += n
		}
		if faults == 0 {
			t.Errorf("SEED=%d: the provider injected no fault", seed)
		}
		// Whether a restart or crash also caught a batch executing at the
		// provider depends on timing (a quick batch is over before it
		// comes): reported here, counted by the long soak's table.
		t.Logf("SEED=%d: %d database restart(s) and %d provider crash(es) landed mid-run, %d and %d caught a batch executing; %d connection break(s)",
			seed, rep.DBRestarts, rep.ProviderKills, rep.DBRestartsMidBatch, rep.ProviderKillsMidBatch, rep.DBBreaks)
		if t.Failed() || len(missed) == 0 {
			return
		}
		t.Logf("SEED=%d: not every fault landed mid-run (%s); trying the next seed", seed, strings.Join(missed, "; "))
	}
	t.Errorf("three short soaks in a row had a fault that never landed mid-run (a database restart, a provider crash or a connection break): the soak tested less than it claims")
}
