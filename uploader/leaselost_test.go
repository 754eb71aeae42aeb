package uploader_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// unrenewable is a store whose leases cannot be renewed: the database went
// away under the run (a restart, a broken connection).
type unrenewable struct{ *tilestore.Store }

func (unrenewable) ExtendLeases(context.Context) (int, error) {
	return 0, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
}

// A run whose leases cannot be renewed stops before another run may take
// its batches over: the batch on the wire is cut at once, not left to its
// request timeout. And it says so: the error is the lost lease, with the
// renewal's failure, not the cancellation it caused in the batch
// ("upload batch: context canceled").
func TestARunThatLosesItsLeaseWithABatchOnTheWireSaysTheLeaseWasLost(t *testing.T) {
	t.Parallel()
	u, _ := stalledWithoutRenewal(t, "fk", 66)
	start := time.Now()
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fk", Concurrency: 1})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the run took %v to stop after its lease of 600ms was lost: the batch on the wire was left to its request timeout", took)
	}
	var lost *uploader.LeaseLostError
	if !errors.As(err, &lost) {
		t.Fatalf("UploadPendingTiles: %v; want the lost lease named", err)
	}
	if want := "connection refused"; !strings.Contains(err.Error(), want) {
		t.Fatalf("UploadPendingTiles: %v; want the renewal's failure (%q) in it", err, want)
	}
}

// A run stopped by its caller (Ctrl-C) lets the batch on the wire finish,
// and keeps renewing its leases while it does: when the renewal fails for
// two thirds of a lease, that batch is cut too, since another run may take
// it over once the lease ends.
func TestAStoppedRunsBatchOnTheWireIsCutWhenItsLeaseIsLost(t *testing.T) {
	t.Parallel()
	u, onWire := stalledWithoutRenewal(t, "fs", 67)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	go func() {
		<-onWire
		cancel() // the operator's Ctrl-C, with the batch on the wire
	}()
	start := time.Now()
	_, _ = u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fs", Concurrency: 1})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the stopped run took %v to end: its batch on the wire outlived the lease (600ms) it could not renew", took)
	}
}

// stalledWithoutRenewal is an uploader of a flight of 4 tiles whose run,
// of a 600 ms lease, cannot renew it, in front of a provider that never
// answers a batch (it holds each until the request ends): a batch is on
// the wire when the lease is lost. onWire gets one value per batch sent.
func stalledWithoutRenewal(t *testing.T, flight string, seed int64) (_ *uploader.Client, onWire <-chan struct{}) {
	t.Helper()
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, 4, 512, seed)
	store := unrenewable{c.Store.ForRun(tilestore.Run{ID: flight + "-run", Host: "here", PID: 9, Lease: 600 * time.Millisecond})}
	sent := make(chan struct{}, 16)
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		select {
		case sent <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
	})
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Store, o.Sleep, o.RequestTimeout = store, nil, time.Minute })
	return u, sent
}
