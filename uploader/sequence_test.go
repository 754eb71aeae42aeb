package uploader_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

func withClientID(id string) func(*uploader.ClientOptions) {
	return func(o *uploader.ClientOptions) { o.ClientID = id }
}

func localLast(t *testing.T, c *providertest.Client, providerURL, client string) uint64 {
	t.Helper()
	st, err := c.Store.SequenceStream(context.Background(), providerURL, client)
	if err != nil {
		t.Fatal(err)
	}
	return st.LastCommitted
}

func TestEveryBatchCarriesTheClientIDAndTheNextNumberOneAtATime(t *testing.T) {
	t.Parallel()
	p, rec, url := strictProvider(t, nil)
	c := providertest.NewClient(t, "sq")
	c.AddTiles(t, "sq", 10, 256, 1)
	u, _ := newUploader(t, url, c, withClientID("drone-7"))
	// Concurrency 4 is asked for; strict sequencing allows one batch in
	// flight: a second would carry a number after one not yet committed.
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sq", BatchSize: 3, Concurrency: 4})
	if err != nil || rep.Pending != 0 || rep.Uploaded() != 10 {
		t.Fatalf("run: %+v, %v; want all 10 uploaded", rep, err)
	}
	reqs := rec.all()
	if len(reqs) != 4 {
		t.Fatalf("%d batch requests, want 4: %+v", len(reqs), reqs)
	}
	for i, r := range reqs {
		if r.Client != "drone-7" || r.Seq != uint64(i+1) || r.Status != 200 {
			t.Errorf("request %d: %+v, want Client-Id drone-7, Client-Sequence %d, 200", i, r, i+1)
		}
	}
	if rec.mostInFlight() != 1 {
		t.Errorf("%d batches were in flight at once, want 1", rec.mostInFlight())
	}
	if last := committedNumbersAreContiguous(t, p, rec, "drone-7"); last != 4 {
		t.Errorf("provider's last committed %d, want 4", last)
	}
	if got := localLast(t, c, url, "drone-7"); got != 4 {
		t.Errorf("client's last committed %d, want 4", got)
	}
	storedOnce(t, p, 10)
}

func TestASequenceGapIsRecoveredThroughClientStateUnderTheSameKey(t *testing.T) {
	t.Parallel()
	p, rec, url := strictProvider(t, nil)
	c := providertest.NewClient(t, "sg")
	c.AddTiles(t, "sg", 6, 256, 2)
	// The client believes 5 committed; the provider (reset, say) has none.
	st, err := c.Store.SequenceStream(testCtx(t), url, "drone-7")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store.SyncSequence(testCtx(t), st.ID, 5); err != nil {
		t.Fatal(err)
	}
	u, _ := newUploader(t, url, c, withClientID("drone-7"))
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sg", BatchSize: 3})
	if err != nil || rep.Pending != 0 || rep.Uploaded() != 6 {
		t.Fatalf("run: %+v, %v; want all 6 uploaded", rep, err)
	}
	reqs := rec.all()
	if len(reqs) != 3 {
		t.Fatalf("%d batch requests, want 3 (the gapped one, its resend, the next): %+v", len(reqs), reqs)
	}
	if reqs[0].Seq != 6 || reqs[0].Code != operation.CodeSequenceGap {
		t.Errorf("first request %+v, want number 6 answered SEQUENCE_GAP", reqs[0])
	}
	if reqs[1].Key != reqs[0].Key || reqs[1].Seq != 1 || reqs[1].Status != 200 {
		t.Errorf("resend %+v, want the same key %s with number 1, answered 200", reqs[1], reqs[0].Key)
	}
	if reqs[2].Key == reqs[0].Key || reqs[2].Seq != 2 || reqs[2].Status != 200 {
		t.Errorf("next batch %+v, want a new key with number 2, answered 200", reqs[2])
	}
	if last := committedNumbersAreContiguous(t, p, rec, "drone-7"); last != 2 {
		t.Errorf("provider's last committed %d, want 2", last)
	}
	if got := localLast(t, c, url, "drone-7"); got != 2 {
		t.Errorf("client's last committed %d, want 2", got)
	}
	storedOnce(t, p, 6)
}

func TestAlreadyCommittedIsSettledByTileLookupWithoutSpendingARejection(t *testing.T) {
	t.Parallel()
	var seals atomic.Int32
	release := make(chan struct{})
	p, rec, url := strictProvider(t, func(c *provider.Config) {
		// The first batch is stored and committed, and its answer held
		// back past the client's request timeout: lost.
		c.AfterSeal = func(string) {
			if seals.Add(1) == 1 {
				<-release
			}
		}
	})
	t.Cleanup(func() { close(release) }) // before the servers close
	// No record of the operation either: with one, the batch settles from
	// its sealed answer (sequence_committed_test.go).
	rec.hideOperations = true
	rec.forgetCommitted = true // no outcome is replayed: ALREADY_COMMITTED
	c := providertest.NewClient(t, "sa")
	c.AddTiles(t, "sa", 6, 256, 3)
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) {
		o.ClientID = "drone-7"
		o.RequestTimeout = time.Second
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sa", BatchSize: 3})
	if err != nil || rep.Pending != 0 || rep.Uploaded() != 6 || rep.Rejected != 0 {
		t.Fatalf("run: %+v, %v; want all 6 uploaded, none rejected", rep, err)
	}
	var committed *seqReq
	for _, r := range rec.all() {
		if r.Code == operation.CodeAlreadyCommitted {
			committed = &r
			break
		}
	}
	if committed == nil || committed.Seq != 1 {
		t.Fatalf("no resend of number 1 was answered ALREADY_COMMITTED: %+v", rec.all())
	}
	var state string
	if err := c.Store.Pool().QueryRow(testCtx(t), `SELECT state FROM upload_batches WHERE op_id = $1`, committed.Key).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "failed" {
		t.Errorf("batch %s is %q, want failed (settled by tile lookup: the provider has no record of it)", committed.Key, state)
	}
	var rejections int
	if err := c.Store.Pool().QueryRow(testCtx(t), `SELECT count(*) FROM upload_rejections`).Scan(&rejections); err != nil {
		t.Fatal(err)
	}
	if rejections != 0 {
		t.Errorf("%d rejections recorded, want none: settling by lookup spends none", rejections)
	}
	if got := localLast(t, c, url, "drone-7"); got != 2 {
		t.Errorf("client's last committed %d, want 2", got)
	}
	if last := serverLast(t, p, "drone-7"); last != 2 {
		t.Errorf("provider's last committed %d, want 2", last)
	}
	storedOnce(t, p, 6)
}

func TestABatchThatFailsConsumesNoNumber(t *testing.T) {
	t.Parallel()
	// The provider takes 2 tiles a batch but its capabilities (rewritten
	// in front of it) say 256: a batch of 3 is answered 413 by the batch
	// handler, inside the provider's sequencer.
	p, rec, url := strictProvider(t, func(c *provider.Config) { c.Limits.MaxBatchTiles = 2 })
	rec.capsMaxTiles = 256
	c := providertest.NewClient(t, "sf")
	c.AddTiles(t, "sf", 5, 256, 4)
	u, _ := newUploader(t, url, c, withClientID("drone-7"))
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sf", BatchSize: 3})
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Status != 413 {
		t.Fatalf("first run: %v, want the 413", err)
	}
	if got := localLast(t, c, url, "drone-7"); got != 0 {
		t.Fatalf("client's last committed %d after the failed batch, want 0", got)
	}
	u, _ = newUploader(t, url, c, withClientID("drone-7"))
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sf", BatchSize: 2})
	if err != nil || rep.Pending != 0 || rep.Uploaded() != 5 {
		t.Fatalf("second run: %+v, %v; want all 5 uploaded", rep, err)
	}
	reqs := rec.all()
	if len(reqs) != 4 || reqs[0].Seq != 1 || reqs[0].Status != 413 {
		t.Fatalf("requests %+v: want the 413 with number 1, then 3 batches", reqs)
	}
	if reqs[1].Seq != 1 || reqs[1].Key == reqs[0].Key || reqs[1].Status != 200 {
		t.Errorf("the batch after the failed one: %+v, want number 1 again under a new key", reqs[1])
	}
	if last := committedNumbersAreContiguous(t, p, rec, "drone-7"); last != 3 {
		t.Errorf("provider's last committed %d, want 3", last)
	}
	storedOnce(t, p, 5)
}

func TestTheFirstBatchFollowsNumbersAnotherToolCommitted(t *testing.T) {
	t.Parallel()
	p, rec, url := strictProvider(t, nil)
	// Another tool (or this client before its database was lost)
	// committed 1..7 as drone-7: the provider's state says so.
	if _, err := p.Pool.Exec(testCtx(t), `INSERT INTO client_sequences (scope, client_id, last_committed) VALUES ('client', 'drone-7', 7)`); err != nil {
		t.Fatal(err)
	}
	c := providertest.NewClient(t, "ss")
	c.AddTiles(t, "ss", 4, 256, 5)
	u, _ := newUploader(t, url, c, withClientID("drone-7"))
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "ss", BatchSize: 2})
	if err != nil || rep.Pending != 0 || rep.Uploaded() != 4 {
		t.Fatalf("run: %+v, %v; want all 4 uploaded", rep, err)
	}
	reqs := rec.all()
	if len(reqs) != 2 || reqs[0].Seq != 8 || reqs[1].Seq != 9 || reqs[0].Status != 200 || reqs[1].Status != 200 {
		t.Fatalf("requests %+v, want numbers 8 and 9, both 200", reqs)
	}
	if last := serverLast(t, p, "drone-7"); last != 9 {
		t.Errorf("provider's last committed %d, want 9", last)
	}
}

func TestAClientIDAgainstAProviderWithoutSequencingStopsBeforeSending(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil) // not strict: no /v1/clients/{id}/state
	c := providertest.NewClient(t, "sn")
	c.AddTiles(t, "sn", 2, 256, 6)
	u, _ := newUploader(t, p.URL, c, withClientID("drone-7"))
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sn"})
	if !errors.Is(err, uploader.ErrNoSequencing) || !strings.Contains(err.Error(), "strict client sequencing") {
		t.Fatalf("run: %v, want ErrNoSequencing saying the provider does not offer strict client sequencing", err)
	}
	if l := p.Ledger(t); len(l.Tiles) != 0 || len(l.Ops) != 0 {
		t.Fatalf("the provider got batches: %+v", l)
	}
	if open := openBatches(t, c, "sn"); len(open) != 0 {
		t.Fatalf("%d batches journaled, want none", len(open))
	}
}

func TestTwoRunsWithOneClientIDNeverHaveTwoBatchesInFlight(t *testing.T) {
	t.Parallel()
	p, rec, url := strictProvider(t, nil)
	c := providertest.NewClient(t, "ta")
	if _, err := c.Store.UpsertFlight(testCtx(t), "tb", tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	c.AddTiles(t, "ta", 8, 256, 7)
	c.AddTiles(t, "tb", 8, 256, 8)
	var wg sync.WaitGroup
	for i, flight := range []string{"ta", "tb", "ta"} {
		store := c.Store.ForRun(tilestore.Run{Lease: time.Minute})
		u, err := uploader.NewClient(uploader.ClientOptions{BaseURL: url, Token: providertest.Token, Store: store, Blobs: c.Blobs,
			ClientID: "drone-7", RequestTimeout: 10 * time.Second}) // real waits: a busy stream is polled
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: flight, BatchSize: 2})
			if err != nil || rep.Pending != 0 {
				t.Errorf("run %d on %s: %+v, %v", i, flight, rep, err)
			}
		})
	}
	wg.Wait()
	if rec.mostInFlight() != 1 {
		t.Errorf("%d batches of drone-7 were in flight at once, want 1", rec.mostInFlight())
	}
	if last := committedNumbersAreContiguous(t, p, rec, "drone-7"); last != 8 {
		t.Errorf("provider's last committed %d, want 8 (16 tiles, 2 a batch)", last)
	}
	storedOnce(t, p, 16)
}

func TestABatchADeadRunLeftOpenOnAnotherFlightStopsTheClientIDNamingThatFlight(t *testing.T) {
	t.Parallel()
	_, rec, url := strictProvider(t, nil)
	c := providertest.NewClient(t, "da")
	if _, err := c.Store.UpsertFlight(testCtx(t), "db", tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	c.AddTiles(t, "da", 2, 256, 9)
	c.AddTiles(t, "db", 2, 256, 10)
	// A run of flight da journaled a batch with number 1 and died.
	st, err := c.Store.SequenceStream(testCtx(t), url, "drone-7")
	if err != nil {
		t.Fatal(err)
	}
	dead := c.Store.ForRun(tilestore.Run{ID: "dead-run", Lease: time.Minute})
	op := operation.NewID()
	if _, err := dead.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: "da", Limit: 2, Stream: st.ID, OpID: op,
		Pick: pickAll(op, "fp")}); err != nil {
		t.Fatal(err)
	}
	if err := dead.ReleaseLeases(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	u, _ := newUploader(t, url, c, withClientID("drone-7"))
	_, err = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "db"})
	var busy *tilestore.SequenceBusyError
	if !errors.As(err, &busy) || busy.FlightID != "da" || !strings.Contains(err.Error(), "upload-pending --flight da") {
		t.Fatalf("run of db: %v, want an error naming flight da to settle first", err)
	}
	if reqs := rec.all(); len(reqs) != 0 {
		t.Fatalf("batches were sent: %+v", reqs)
	}
}

func TestAFailingClientStateEndsTheRunBeforeSendingSayingWhatWasAsked(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) { c.StrictSequencing = true })
	var states atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/clients/") {
			states.Add(1)
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "state store down", nil, nil)
			return
		}
		p.Server.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	c := providertest.NewClient(t, "se")
	c.AddTiles(t, "se", 2, 256, 11)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.ClientID, o.MaxResends = "drone-7", 1 })
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "se"})
	var pe *uploader.ProviderError
	want := "read the provider's sequence state of client drone-7 (GET /v1/clients/drone-7/state)"
	if !errors.As(err, &pe) || pe.Status != 503 || !strings.Contains(err.Error(), want) {
		t.Fatalf("run: %v, want a 503 saying %q", err, want)
	}
	if states.Load() != 2 {
		t.Errorf("state asked %d times, want 2 (one resend)", states.Load())
	}
	if l := p.Ledger(t); len(l.Ops) != 0 {
		t.Fatalf("batches reached the provider: %+v", l.Ops)
	}
}

func TestAnotherBatchsAnswerReplayedForOurNumberIsNeverAppliedToOurTiles(t *testing.T) {
	t.Parallel()
	p, rec, url := strictProvider(t, nil) // outcomes cached: a committed number replays its batch's answer
	c := providertest.NewClient(t, "sr")
	ours := c.AddTiles(t, "sr", 3, 256, 12)
	// Our batch was journaled with number 1 by a run that died before
	// sending it (its database, say, was restored from before the number
	// was used).
	st, err := c.Store.SequenceStream(testCtx(t), url, "drone-7")
	if err != nil {
		t.Fatal(err)
	}
	dead := c.Store.ForRun(tilestore.Run{ID: "dead-run", Lease: time.Minute})
	op := operation.NewID()
	claimed, err := dead.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: "sr", Limit: 3, Stream: st.ID, OpID: op,
		Pick: pickAsUploader(op, "sr")})
	if err != nil || claimed.Batch.ClientSeq != 1 {
		t.Fatalf("journal our batch: %+v, %v", claimed.Batch, err)
	}
	if err := dead.ReleaseLeases(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// Meanwhile another tool committed number 1 as drone-7, for a batch
	// of its own.
	other := providertest.PNG(rand.New(rand.NewSource(99)), 300)
	var body bytes.Buffer
	ct, err := providertest.WriteBatch(&body, []providertest.BatchTile{{ID: "sr-other-tool", Z: 17, X: 1, Y: 1,
		Size: int64(len(other)), SHA256: providertest.SHA256(other), Body: bytes.NewReader(other)}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/v1/flights/sr/tiles:batch", &body)
	req.Header.Set("Authorization", "Bearer "+providertest.Token)
	req.Header.Set("Content-Type", ct)
	req.Header.Set(operation.HeaderIdempotencyKey, operation.NewID())
	req.Header.Set(operation.HeaderClientID, "drone-7")
	req.Header.Set(operation.HeaderClientSequence, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the other tool's batch: %v %v", resp, err)
	}
	resp.Body.Close()

	u, _ := newUploader(t, url, c, withClientID("drone-7"))
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sr"})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	reqs := rec.all()
	if len(reqs) == 0 || reqs[0].Key != claimed.Batch.OpID || reqs[0].Seq != 1 || reqs[0].Status != 200 {
		t.Fatalf("first request %+v, want our batch resent as number 1 and answered with the other batch's 200", reqs)
	}
	var rejections int
	if err := c.Store.Pool().QueryRow(testCtx(t), `SELECT count(*) FROM upload_rejections`).Scan(&rejections); err != nil {
		t.Fatal(err)
	}
	if rejections != 0 || rep.Rejected != 0 {
		t.Errorf("%d rejections recorded (report: %d): the other batch's answer was applied to ours", rejections, rep.Rejected)
	}
	if rep.Uploaded() != len(ours) || rep.Pending != 0 {
		t.Errorf("report %+v, want our %d tiles uploaded under a new batch", rep, len(ours))
	}
	if last := serverLast(t, p, "drone-7"); last != 2 {
		t.Errorf("provider's last committed %d, want 2 (the other tool's 1, then ours)", last)
	}
}

func TestAnotherRunsBatchHoldingTheNumberIsWaitedForAndSettledOnceItsLeaseEnds(t *testing.T) {
	t.Parallel()
	p, rec, url := strictProvider(t, nil)
	c := providertest.NewClient(t, "sw")
	c.AddTiles(t, "sw", 4, 256, 13)
	st, err := c.Store.SequenceStream(testCtx(t), url, "drone-7")
	if err != nil {
		t.Fatal(err)
	}
	// Another run holds number 1 in a batch of two tiles, under a live
	// lease; it dies without renewing it.
	other := c.Store.ForRun(tilestore.Run{ID: "other-run", Lease: time.Minute})
	op := operation.NewID()
	held, err := other.ClaimBatch(testCtx(t), tilestore.Claim{FlightID: "sw", Limit: 2, Stream: st.ID, OpID: op,
		Pick: pickAsUploader(op, "sw")})
	if err != nil {
		t.Fatal(err)
	}
	var waits atomic.Int32
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) {
		o.ClientID = "drone-7"
		o.Sleep = func(ctx context.Context, _ time.Duration) error {
			// The run waits for the other run's batch; while it waits,
			// that run's lease runs out.
			if waits.Add(1) == 1 {
				if _, err := c.Store.Pool().Exec(ctx, `UPDATE upload_batches SET lease_expires_at = now() WHERE op_id = $1`, held.Batch.OpID); err != nil {
					t.Error(err)
				}
			}
			return ctx.Err()
		}
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sw", BatchSize: 2})
	if err != nil || rep.Pending != 0 || rep.Uploaded() != 4 {
		t.Fatalf("run: %+v, %v; want all 4 uploaded", rep, err)
	}
	if waits.Load() == 0 {
		t.Fatal("the run never waited for the other run's batch")
	}
	reqs := rec.all()
	if len(reqs) != 2 || reqs[0].Key != held.Batch.OpID || reqs[0].Seq != 1 || reqs[1].Seq != 2 {
		t.Fatalf("requests %+v: want the other run's batch sent with its number 1, then ours with 2", reqs)
	}
	if last := committedNumbersAreContiguous(t, p, rec, "drone-7"); last != 2 {
		t.Errorf("provider's last committed %d, want 2", last)
	}
}

// A sequenced batch advised to wait past the cap on one wait waits apart,
// and its resend takes the one slot a client ID allows: the worker's next
// claim finds the batch holding the client's next number and ends, which
// frees the slot, so the run neither deadlocks nor has two batches in
// flight; once the batch is settled the call passes again and sends the
// tiles left, so the run uploads them all.
func TestASequencedBatchWaitingApartTakesTheOneSlotOnceTheWorkerLetsItGo(t *testing.T) {
	t.Parallel()
	var advised atomic.Bool
	rec, url, top := strictBehindFront(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && advised.CompareAndSwap(false, true) {
			_, _ = io.Copy(io.Discard, r.Body)
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "busy",
				&operation.RetryExtension{Allowed: true, After: 100 * time.Millisecond, Strategy: operation.StrategyFixed}, nil)
			return true
		}
		return false
	})
	c := providertest.NewClient(t, "sa")
	c.AddTiles(t, "sa", 4, 256, 14)
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) {
		o.ClientID = "drone-9"
		o.Sleep = operation.Sleep
		o.MaxRetryDelay = 10 * time.Millisecond // the advice goes past it: the batch waits apart
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sa", BatchSize: 2})
	if err != nil || rep.Uploaded() != 4 || rep.Pending != 0 {
		t.Fatalf("run: %+v, %v: want all 4 tiles uploaded", rep, err)
	}
	reqs := rec.all()
	if len(reqs) == 0 || reqs[0].Seq != 1 || reqs[0].Status != http.StatusOK {
		t.Fatalf("requests at the provider %+v: want the advised batch resent with number 1 and answered", reqs)
	}
	if !advised.Load() {
		t.Fatal("no batch was advised to wait")
	}
	if n := top(); n != 1 {
		t.Errorf("most batches in flight at the provider = %d, want 1", n)
	}
}

// A sequenced batch waits the provider's advice in place (the next number
// must not go before it), and those sends are the provider's asking, not
// tilectl's own resends: a batch polled as advised is still resent after
// an answer that names no wait, as an unsequenced one is
// (TestAdvisedPollsDoNotSpendTheResendBound).
func TestASequencedBatchsAdvisedPollsDoNotSpendTheResendBound(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	rec, url, _ := strictBehindFront(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return false
		}
		switch n := posts.Add(1); {
		case n <= 5:
			_, _ = io.Copy(io.Discard, r.Body)
			writeExtensionAlone(w, http.StatusConflict, operation.CodeIdempotencyProcessing, "in progress",
				&operation.RetryExtension{Allowed: true, After: 5 * time.Millisecond, Strategy: operation.StrategyFixed})
			return true
		case n == 6:
			_, _ = io.Copy(io.Discard, r.Body)
			operation.WriteError(w, http.StatusGatewayTimeout, operation.CodeDeadlineExceeded, "storage timed out", nil, nil)
			return true
		}
		return false
	})
	c := providertest.NewClient(t, "sp")
	c.AddTiles(t, "sp", 1, 256, 14)
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) {
		o.ClientID = "drone-4"
		o.Sleep = operation.Sleep
		o.MaxResends = 5
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "sp", BatchSize: 1})
	if err != nil || rep.Uploaded() != 1 || rep.Pending != 0 {
		t.Fatalf("report %+v, %v: want the 504 resent and the tile uploaded", rep, err)
	}
	if got := posts.Load(); got != 7 {
		t.Errorf("%d batch requests, want 7 (5 advised polls, the 504, its resend)", got)
	}
	if reqs := rec.all(); len(reqs) != 1 || reqs[0].Seq != 1 {
		t.Errorf("requests at the provider %+v: want the resend alone, number 1", reqs)
	}
}

// In a sequenced flight no batch goes before the one holding the client's
// next number: when that batch waits for the provider's advised time past
// the run's deadline, every tile left waits with it, and the call says so
// (Blocked: stop, until the batch's not-before) rather than reporting a
// partial run that another call at once could go on with.
func TestASequencedCallBehindItsBatchWaitingPastTheDeadlineIsBlocked(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	_, url, _ := strictBehindFront(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || posts.Add(1) != 1 {
			return false
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "600")
		operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "busy", nil, nil)
		return true
	})
	c := providertest.NewClient(t, "sb")
	c.AddTiles(t, "sb", 4, 256, 14)
	u, _ := newUploader(t, url, c, withClientID("drone-5"))
	ctx, cancel := context.WithTimeout(testCtx(t), 3*time.Second)
	defer cancel()
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "sb", BatchSize: 2})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if rep.Pending != 4 || len(rep.Waiting) != 1 || rep.Waiting[0].Tiles != 2 {
		t.Fatalf("report %+v: want the 4 tiles pending behind one waiting batch of 2", rep)
	}
	until, stop := rep.Blocked()
	if !stop || !until.Equal(rep.Waiting[0].Until) {
		t.Errorf("Blocked() = %v, %v: want stop, until the waiting batch's %v", until, stop, rep.Waiting[0].Until)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("%d batch requests, want 1: nothing goes behind the waiting batch", n)
	}
}

// strictBehindFront starts a provider with strict client sequencing (its
// requests recorded) behind a front server: answer answers a request
// itself and reports true, or reports false and the request goes on to
// the provider. url is the front's; top is the most batch requests the
// front has had in flight at once (answered or passed on).
func strictBehindFront(t *testing.T, answer func(http.ResponseWriter, *http.Request) bool) (rec *seqRecorder, url string, top func() int32) {
	t.Helper()
	_, rec, url = strictProvider(t, nil)
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	back := httputil.NewSingleHostReverseProxy(target)
	var now, most atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			n := now.Add(1)
			defer now.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		}
		if !answer(w, r) {
			back.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(front.Close)
	return rec, front.URL, most.Load
}
