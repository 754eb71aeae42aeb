package uploader_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// killer SIGKILLs the running child when the provider reaches the chosen
// point of the chosen batch, and holds the provider there until the child
// is dead, so the child never sees that answer.
type killer struct {
	mu     sync.Mutex
	child  *exec.Cmd
	done   chan struct{}
	point  string // "run" or "seal"
	at     int    // kill at the at-th hook call of this point
	calls  int
	killed []string // op IDs the kill interrupted
}

func (k *killer) hook(point string) func(string) {
	return func(opID string) {
		k.mu.Lock()
		if k.point != point || k.child == nil {
			k.mu.Unlock()
			return
		}
		k.calls++
		if k.calls != k.at {
			k.mu.Unlock()
			return
		}
		k.killed = append(k.killed, opID)
		_ = k.child.Process.Kill()
		done := k.done
		k.mu.Unlock()
		<-done
	}
}

// childCmd is the uploader child (see main_test.go) for flight of c,
// talking to the provider at providerURL; extra adds CHILD_* settings.
func childCmd(c *providertest.Client, providerURL, flight, dieAfterOpen string, extra ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TILECTL_UPLOADER_CHILD=1", "CHILD_DB_URL="+c.URL, "CHILD_BLOB_ROOT="+c.Blobs.Root(),
		"CHILD_PROVIDER_URL="+providerURL, "CHILD_TOKEN="+providertest.Token, "CHILD_FLIGHT="+flight,
		"CHILD_DIE_AFTER_OPEN="+dieAfterOpen)
	cmd.Env = append(cmd.Env, extra...)
	return cmd
}

// cleanRunsFinish runs children that nobody kills until one exits 0, and
// fails the test if ten did not.
func cleanRunsFinish(t *testing.T, c *providertest.Client, flight string, run func(dieAfterOpen, point string, at int) (int, string)) {
	t.Helper()
	for i := 1; ; i++ {
		if i > 10 {
			t.Fatalf("still pending after 10 clean runs: %v", c.Counts(t, flight))
		}
		exit, stderr := run("", "", 0)
		if exit == 0 {
			break
		}
		t.Logf("clean run %d exited %d: %s", i, exit, stderr)
	}
}

// run runs cmd to its end with k armed to kill it at the at-th hook call
// of point ("" for none), and returns its exit code (-1 when killed) and
// its stderr.
func (k *killer) run(t *testing.T, cmd *exec.Cmd, point string, at int) (exit int, stderr string) {
	t.Helper()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	done := make(chan struct{})
	k.mu.Lock()
	// Started under the lock: a hook never sees a child without its
	// process.
	if err := cmd.Start(); err != nil {
		k.mu.Unlock()
		t.Fatal(err)
	}
	k.child, k.done, k.point, k.at, k.calls = cmd, done, point, at, 0
	k.mu.Unlock()
	err := cmd.Wait()
	close(done)
	k.mu.Lock()
	k.child = nil
	k.mu.Unlock()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), errb.String()
		}
		t.Fatal(err)
	}
	return 0, errb.String()
}

func TestSIGKILLAtAnyPointStillUploadsExactlyOnce(t *testing.T) {
	t.Parallel()
	const flight, n = "fk", 200
	k := &killer{}
	p := providertest.Start(t, func(c *provider.Config) {
		c.BeforeRun = k.hook("run")
		c.AfterSeal = k.hook("seal")
	})
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, n, 4096, 13)

	run := func(dieAfterOpen, point string, at int) (exit int, stderr string) {
		t.Helper()
		// A killed child's batches are its run's until their lease runs
		// out; only then may the next child settle them. The lease is
		// ended in the database rather than waited out.
		if _, err := c.Store.Pool().Exec(context.Background(),
			`UPDATE upload_batches SET lease_expires_at = now() WHERE flight_id = $1 AND state = 'open'`, flight); err != nil {
			t.Fatal(err)
		}
		return k.run(t, childCmd(c, p.URL, flight, dieAfterOpen), point, at)
	}
	noneUploadedThatProviderLacks := func() {
		t.Helper()
		held := map[string]bool{}
		for _, tl := range p.Ledger(t).Tiles {
			held[tl.TileID] = true
		}
		rows, err := c.Store.Pool().Query(context.Background(), `SELECT tile_id FROM tiles WHERE flight_id = $1 AND voting_status = 'uploaded'`, flight)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			_ = rows.Scan(&id)
			if !held[id] {
				t.Fatalf("tile %s is marked uploaded but the provider does not hold it", id)
			}
		}
	}

	kills := []struct {
		name         string
		dieAfterOpen string
		point        string
		at           int
	}{
		{"before send (batch journaled)", "3", "", 0},
		{"during send (provider running the batch)", "", "run", 2},
		{"after the provider stored and sealed, before the answer", "", "seal", 2},
		{"after seal again, later batch", "", "seal", 3},
	}
	for _, kc := range kills {
		exit, stderr := run(kc.dieAfterOpen, kc.point, kc.at)
		if exit != -1 {
			t.Fatalf("%s: child exited %d, want killed (-1); stderr:\n%s", kc.name, exit, stderr)
		}
		noneUploadedThatProviderLacks()
		if open, _ := c.Store.OpenBatches(context.Background(), flight); len(open) == 0 {
			t.Fatalf("%s: no open batch left behind by the kill", kc.name)
		}
	}
	cleanRunsFinish(t, c, flight, run)
	noneUploadedThatProviderLacks()
	l := allUploadedOnce(t, c, p, flight, n)
	ops := map[string]provider.LedgerOp{}
	for _, o := range l.Ops {
		ops[o.OpID] = o
		if o.Fingerprints != 1 {
			t.Errorf("op %s came with %d fingerprints", o.OpID, o.Fingerprints)
		}
	}
	for _, id := range k.killed {
		if ops[id].Requests < 2 {
			t.Errorf("op %s, interrupted by a kill, was not resent with the same key (requests=%d)", id, ops[id].Requests)
		}
	}
	if len(k.killed) != 3 {
		t.Fatalf("provider-side kills = %d, want 3", len(k.killed))
	}
}
