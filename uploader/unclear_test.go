package uploader_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// logBuf is a log destination safe for the uploader's concurrent workers.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count is how many log lines contain s.
func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func rejectionsOf(t *testing.T, c *providertest.Client) int {
	t.Helper()
	var n int
	if err := c.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM upload_rejections`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func batchState(t *testing.T, c *providertest.Client, opID string) string {
	t.Helper()
	var s string
	if err := c.Store.Pool().QueryRow(context.Background(), `SELECT state FROM upload_batches WHERE op_id = $1`, opID).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// carriedOnce fails the test when a tile went under more than one key.
func carriedOnce(t *testing.T, p *providertest.Recorder) {
	t.Helper()
	for id, n := range p.Carried() {
		if n > 1 {
			t.Errorf("tile %s travelled under %d keys", id, n)
		}
	}
	if twice := p.StoredTwice(); len(twice) > 0 {
		t.Errorf("tiles stored twice: %s", strings.Join(twice, ", "))
	}
}

// A 2xx whose body is cut off after every resend leaves
// the batch's outcome unknown; the only safe retry is the same key. The
// batch stays open (nothing is rejected), and the next run settles it
// under that key.
func TestACutOff2xxKeepsItsKeyOpen(t *testing.T) {
	t.Parallel()
	p := storingAgain(t)
	first := true
	p.LoseAnswers(func(string, []string) string {
		if first {
			first = false
			return "cut"
		}
		return ""
	})
	c := providertest.NewClient(t, "fc")
	c.AddTiles(t, "fc", 4, 256, 11) // one batch
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.MaxResends = 1 })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fc", Concurrency: 1})
	if err != nil {
		t.Fatalf("run with the answer cut off: %v", err)
	}
	if rep.Rejected != 0 || rep.Uploaded() != 0 || rep.Pending != 4 || rep.Outcome != uploader.OutcomePartial {
		t.Fatalf("report %+v; want nothing rejected or uploaded, 4 pending, partial", rep)
	}
	if n := rejectionsOf(t, c); n != 0 {
		t.Errorf("%d rejections recorded for a batch whose outcome is unknown, want 0", n)
	}
	open := openBatches(t, c, "fc")
	if len(open) != 1 {
		t.Fatalf("%d open batches, want the cut-off batch still open", len(open))
	}

	// The next run resends the same key (its answer is cut off again) and
	// settles it from the provider's operation state.
	rep, err = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fc", Concurrency: 1})
	if err != nil || rep.Pending != 0 || rep.Rejected != 0 {
		t.Fatalf("next run: %+v, %v; want all settled, none rejected", rep, err)
	}
	if n := c.Counts(t, "fc")[tilestore.StatusUploaded]; n != 4 {
		t.Errorf("%d of 4 tiles uploaded", n)
	}
	if s := batchState(t, c, open[0].OpID); s != "settled" {
		t.Errorf("the cut-off batch is %s, want settled under its key", s)
	}
	carriedOnce(t, p)
}

// Only the contract's 404 TILE_NOT_FOUND means a tile is
// not held. A bare 404 from the lookup route (a gateway's, or a server that
// does not route lookups) says nothing about the tile: it does not go
// under a new key while its first key's outcome is unknown, and the run
// says once that the provider does not answer lookups.
func TestABare404FromTheLookupRouteIsNotTakenAsNotHeld(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lose func(ids []string) string
	}{
		{"answer lost then key expired", func([]string) string { return "drop" }},
		{"result omitted", func(ids []string) string { return "omit:" + ids[0] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := storingAgain(t)
			p.Unrouted(true, false)
			first := true
			p.LoseAnswers(func(_ string, ids []string) string {
				if first {
					first = false
					return tc.lose(ids)
				}
				return ""
			})
			c := providertest.NewClient(t, "fl")
			c.AddTiles(t, "fl", 4, 256, 12) // one batch
			var logs logBuf
			u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) {
				o.MaxResends = 1
				o.Logger = zerolog.New(&logs)
			})
			for range 3 {
				_, _ = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fl", Concurrency: 1})
			}
			carriedOnce(t, p)
			if p.Lookups() == 0 {
				t.Fatalf("the provider was never asked")
			}
			if n := logs.count("does not answer tile lookups"); n != 1 {
				t.Errorf("the run said %d times that the provider does not answer lookups, want once", n)
			}

			// Once the provider answers lookups, the tiles settle, each
			// stored once.
			p.Unrouted(false, false)
			for run := 0; run < 3 && c.Counts(t, "fl")[tilestore.StatusUploaded] < 4; run++ {
				_, _ = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fl", Concurrency: 1})
			}
			if n := c.Counts(t, "fl")[tilestore.StatusUploaded]; n != 4 {
				t.Errorf("%d of 4 tiles uploaded once the provider answers lookups", n)
			}
			carriedOnce(t, p)
		})
	}
}

// GET /v1/operations/{op_id} says "absent" with a 200;
// a 404 from it (a gateway's, or a server that does not route it) says
// nothing about the operation. An earlier run's open batch that cannot be
// resent as it is stays open instead of failing, and the run says once
// that the provider does not answer operation state.
func TestABare404FromTheOperationRouteIsNotTakenAsAbsent(t *testing.T) {
	t.Parallel()
	p := storingAgain(t)
	p.Unrouted(false, true)
	c := providertest.NewClient(t, "fo")
	c.AddTiles(t, "fo", 4, 256, 13)
	ctx := testCtx(t)
	// A dead run's batch, journaled with a fingerprint this client cannot
	// rebuild (so it is not resent as it is), whose tiles the provider
	// stored before the answer was lost.
	dead := c.Store.ForRun(tilestore.Run{ID: "dead-run", Lease: time.Minute})
	op := operation.NewID()
	got, err := dead.ClaimBatch(ctx, tilestore.Claim{FlightID: "fo", Limit: 4, OpID: op, Pick: pickAll(op, "fp-of-another-client")})
	if err != nil || len(got.Tiles) != 4 {
		t.Fatalf("the dead run's claim: %+v %v", got, err)
	}
	for _, tl := range got.Tiles {
		p.Hold(tl.ID, tl.SHA256, int(tl.SizeBytes))
	}
	if _, err := c.Store.Pool().Exec(ctx, `UPDATE upload_batches SET lease_expires_at = now() - interval '1 second' WHERE op_id = $1`, op); err != nil {
		t.Fatal(err) // the dead run's lease has run out
	}
	var logs logBuf
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.Logger = zerolog.New(&logs) })
	for range 2 {
		if _, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fo", Concurrency: 1}); err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	if s := batchState(t, c, op); s != "open" {
		t.Errorf("the dead run's batch is %s, want still open (a bare 404 is not the provider saying absent)", s)
	}
	if n := logs.count("does not answer operation state"); n != 1 {
		t.Errorf("the run said %d times that the provider does not answer operation state, want once", n)
	}

	// Once it answers, the batch settles: absent, then each tile looked up.
	p.Unrouted(false, false)
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fo", Concurrency: 1})
	if err != nil || rep.Pending != 0 {
		t.Fatalf("run once the provider answers: %+v, %v", rep, err)
	}
	if n := c.Counts(t, "fo")[tilestore.StatusUploaded]; n != 4 {
		t.Errorf("%d of 4 tiles uploaded", n)
	}
	if twice := p.StoredTwice(); len(twice) > 0 {
		t.Errorf("tiles stored twice: %s", strings.Join(twice, ", "))
	}
}
