package uploader

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// Fingerprint is fingerprint, for tests that journal a batch by hand.
var Fingerprint = fingerprint

// ClassifierResends reports whether the one classifier resends a first
// attempt answered with status, header and body.
func ClassifierResends(status int, header http.Header, body []byte) bool {
	return classify(attemptEnd{status: status, header: header, body: body, attempt: 1}, time.Now()).retries()
}

// ReadOperation runs the operation-state request path (GET
// /v1/operations/{op_id}) as an open batch's settling does.
func (u *Client) ReadOperation(ctx context.Context, opID string) error {
	_, _, _, err := u.readOperation(ctx, nil, opID)
	return err
}

// ClientState runs the client-state request path (GET
// /v1/clients/{client_id}/state) as a sequenced run does.
func (u *Client) ClientState(ctx context.Context, client string) (uint64, error) {
	return u.clientState(ctx, nil, client)
}

// WatchFirstWaits counts, on each call's gate from now on, the AcquireFirst
// callers (due batches going again) that have asked for a slot and not
// yet got one or given up: the returned func reads the count.
func WatchFirstWaits(u *Client) func() int {
	var waiting atomic.Int32
	u.wrapGate = func(g gate) gate { return &firstWaitsGate{gate: g, waiting: &waiting} }
	return func() int { return int(waiting.Load()) }
}

type firstWaitsGate struct {
	gate
	waiting *atomic.Int32
}

func (g *firstWaitsGate) AcquireFirst(ctx context.Context) (func(), error) {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	return g.gate.AcquireFirst(ctx)
}
