package uploader_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

// Strict client sequencing under SIGKILL, with real processes: a child is
// killed after its batch's number was journaled and before a byte was sent,
// and after the provider stored and committed a batch but before the child
// saw the answer. Later children resend the open batch under the same key
// and number and settle it; every tile is stored once and the numbers the
// provider committed are 1..N without a hole.
func TestSIGKILLWithClientSequencesStillUploadsExactlyOnceWithContiguousNumbers(t *testing.T) {
	t.Parallel()
	const flight, n = "fq", 60
	k := &killer{}
	p := providertest.Start(t, func(c *provider.Config) {
		c.StrictSequencing = true
		c.AfterSeal = k.hook("seal")
	})
	rec := &seqRecorder{}
	hs := httptest.NewServer(rec.wrap(p.Server.Handler()))
	t.Cleanup(hs.Close)
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, n, 1024, 17)

	run := func(dieAfterOpen, point string, at int) (int, string) {
		t.Helper()
		// A killed child's lease ends now rather than after its length,
		// so the next child settles its batch at once.
		if _, err := c.Store.Pool().Exec(context.Background(),
			`UPDATE upload_batches SET lease_expires_at = now() WHERE state = 'open'`); err != nil {
			t.Fatal(err)
		}
		return k.run(t, childCmd(c, hs.URL, flight, dieAfterOpen, "CHILD_CLIENT_ID=drone-9", "CHILD_BATCH_SIZE=6"), point, at)
	}
	openSeq := func() (string, uint64) {
		t.Helper()
		open, err := c.Store.OpenBatches(context.Background(), flight)
		if err != nil || len(open) != 1 || open[0].ClientSeq == 0 {
			t.Fatalf("open batches after the kill: %+v (%v), want one bound to a number", open, err)
		}
		return open[0].OpID, open[0].ClientSeq
	}

	// Killed after the number was journaled, before the first byte.
	if exit, stderr := run("2", "", 0); exit != -1 {
		t.Fatalf("child exited %d, want killed; stderr:\n%s", exit, stderr)
	}
	unsentOp, unsentSeq := openSeq()
	for _, r := range rec.all() {
		if r.Key == unsentOp {
			t.Fatalf("the batch killed before sending reached the provider: %+v", r)
		}
	}
	// Killed after the provider committed the batch, before the answer.
	if exit, stderr := run("", "seal", 2); exit != -1 {
		t.Fatalf("child exited %d, want killed; stderr:\n%s", exit, stderr)
	}
	sealedOp, sealedSeq := openSeq()
	cleanRunsFinish(t, c, flight, run)

	if got := c.Counts(t, flight)[tilestore.StatusUploaded]; got != n {
		t.Fatalf("uploaded %d, want %d", got, n)
	}
	storedOnce(t, p, n)
	last := committedNumbersAreContiguous(t, p, rec, "drone-9")
	if got := localLast(t, c, hs.URL, "drone-9"); got != last {
		t.Errorf("client's last committed %d, provider's %d", got, last)
	}
	for _, killed := range []struct {
		op  string
		seq uint64
	}{{unsentOp, unsentSeq}, {sealedOp, sealedSeq}} {
		var sends int
		for _, r := range rec.all() {
			if r.Key != killed.op {
				continue
			}
			sends++
			if r.Seq != killed.seq || r.Client != "drone-9" {
				t.Errorf("batch %s, journaled with number %d, was sent as %s/%d", killed.op, killed.seq, r.Client, r.Seq)
			}
		}
		if sends == 0 {
			t.Errorf("batch %s was never sent after the kill", killed.op)
		}
	}
	var resent int
	for _, r := range rec.all() {
		if r.Key == sealedOp {
			resent++
		}
	}
	if resent < 2 {
		t.Errorf("the batch committed before the kill was sent %d time(s), want a resend under the same key", resent)
	}
}
