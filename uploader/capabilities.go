package uploader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// Capabilities is the provider's GET /v1/capabilities answer.
type Capabilities struct {
	APIVersion    string `json:"api_version"`
	MaxBatchTiles int    `json:"max_batch_tiles"`
	MaxBatchBytes int64  `json:"max_batch_bytes"`
	MaxTileBytes  int64  `json:"max_tile_bytes"`
	Idempotency   struct {
		RetentionSeconds int64 `json:"retention_seconds"`
	} `json:"idempotency"`
}

// limits is how one run sizes its batches.
type limits struct {
	tiles     int
	bytes     int64
	tileBytes int64
}

// The contract's example values stand in for limits a provider leaves out.
const (
	fallbackBatchTiles = 256
	fallbackBatchBytes = 32 << 20
	fallbackTileBytes  = 4 << 20
)

func (c Capabilities) limits(batchSize int) limits {
	l := limits{tiles: c.MaxBatchTiles, bytes: c.MaxBatchBytes, tileBytes: c.MaxTileBytes}
	if l.tiles <= 0 {
		l.tiles = fallbackBatchTiles
	}
	if l.bytes <= 0 {
		l.bytes = fallbackBatchBytes
	}
	if l.tileBytes <= 0 {
		l.tileBytes = fallbackTileBytes
	}
	if batchSize > 0 && batchSize < l.tiles {
		l.tiles = batchSize
	}
	// A provider's limits are honoured downwards only: a batch never holds
	// more than clientMaxBatchTiles tiles or clientMaxBatchBytes bytes in
	// memory, whatever it advertises.
	l.tiles = min(l.tiles, clientMaxBatchTiles)
	l.bytes = min(l.bytes, clientMaxBatchBytes)
	return l
}

// batchBytes is how big a batch of l is expected to be: l.tiles of the
// mean size of sample (pending tiles of the flight), within l.bytes; 0
// when sample is empty.
func (l limits) batchBytes(sample []tilestore.Tile) int64 {
	if len(sample) == 0 {
		return 0
	}
	var sum int64
	for _, t := range sample {
		sum += t.SizeBytes
	}
	return min(sum/int64(len(sample))*int64(l.tiles), l.bytes)
}

// The client's own ceilings on a batch, whatever a provider advertises.
const (
	clientMaxBatchTiles = 4096
	clientMaxBatchBytes = 64 << 20
)

// capabilities reads GET /v1/capabilities once per run.
func (u *Client) capabilities(ctx context.Context, rep *runReport) (Capabilities, error) {
	var c Capabilities
	ex := &exchange{u: u, runCtx: ctx, report: rep, accept: func(b []byte) bool {
		return json.Unmarshal(b, &Capabilities{}) == nil
	}}
	var fuse *firstContactFuse
	if !u.answered.Load() {
		ex.probeAttempts = probeAttempts
		fuse = u.armFirstContact(ctx)
		defer fuse.release()
		ex.runCtx, ex.heard = fuse.ctx, fuse.stop
	}
	a := u.doExchange(ex, http.MethodGet, "/v1/capabilities", nil, nil)
	switch {
	case fuse.blown() && ctx.Err() == nil:
		return c, &NoProviderError{URL: u.base.Redacted(), FirstContact: u.firstContact,
			Problem: fmt.Sprintf("no answer within %s of the first request (connections may be accepted, "+
				"but nothing answers: a stuck modem, a captive portal?); check the host, the port and any firewall", u.firstContact)}
	case a.cancelled:
	case a.status == 0 && a.err != nil:
		var je *journalError
		if !errors.As(a.err, &je) {
			return c, &NoProviderError{URL: u.base.Redacted(), Problem: noAnswer(a.err), Err: a.err}
		}
	case a.status == http.StatusNotFound:
		// The contract always routes GET /v1/capabilities: a 404, whatever
		// its body, means the base URL has no API under it (a path too many).
		return c, &NoProviderError{URL: u.base.Redacted(), Problem: notFound(redactedEndpoint(u.base, "/v1/capabilities"), u.base.Path)}
	case a.status != 0 && (a.status < 300 || a.status >= 400) && a.bodyErr == nil:
		if problem := notTheAPI(a.status, a.header.Get("Content-Type"), a.body); problem != "" {
			return c, &NoProviderError{URL: u.base.Redacted(), Problem: problem}
		}
	}
	if err := a.failure("", "read provider capabilities"); err != nil {
		return c, err
	}
	if err := json.Unmarshal(a.body, &c); err != nil {
		return c, &ProviderError{Status: a.status, Message: fmt.Sprintf("capabilities answer is not JSON: %v", err)}
	}
	u.answered.Store(true)
	if c.APIVersion != "" && c.APIVersion != "v1" {
		return c, &ProviderError{Status: a.status, Message: fmt.Sprintf("provider speaks API %q, this client v1", c.APIVersion)}
	}
	return c, nil
}

// firstContactFuse ends a first contact that hears nothing within its
// bound: it cancels its context when the bound passes before any answer
// (of any status) came. Once an answer came it is stopped, and a provider
// that answers slowly or asks to wait is given the run's usual patience.
type firstContactFuse struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

// errFirstContact is the fuse's cancellation cause.
var errFirstContact = errors.New("no answer within the first contact's bound")

func (u *Client) armFirstContact(ctx context.Context) *firstContactFuse {
	f := &firstContactFuse{}
	f.ctx, f.cancel = context.WithCancelCause(ctx)
	f.timer = time.AfterFunc(u.firstContact, func() { f.cancel(errFirstContact) })
	return f
}

// stop disarms the fuse; a nil fuse does nothing.
func (f *firstContactFuse) stop() {
	if f != nil {
		f.timer.Stop()
	}
}

// release stops the fuse and frees its context, once the exchange is over.
func (f *firstContactFuse) release() {
	f.timer.Stop()
	f.cancel(nil)
}

// blown reports whether the fuse ended the exchange.
func (f *firstContactFuse) blown() bool {
	return f != nil && errors.Is(context.Cause(f.ctx), errFirstContact)
}

// redactedEndpoint is the URL of path under base, credentials redacted.
func redactedEndpoint(base *url.URL, path string) string {
	e := *base
	e.Path += path
	return e.Redacted()
}

// Capabilities asks the provider for its capabilities: the first contact
// of a command that sends no batch (tiles reconcile), bounded by
// ClientOptions.FirstContactTimeout so a wrong URL fails fast.
func (u *Client) Capabilities(ctx context.Context) (Capabilities, error) {
	return u.capabilities(ctx, nil)
}
