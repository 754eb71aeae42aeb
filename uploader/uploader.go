// Package uploader moves pending tiles from the tile store and the blob cache
// to a satellite provider that speaks the API of docs/provider-api.md.
//
// TileUploader is the contract the retry decorator and the upload-pending
// command consume; Client is its implementation. An implementation
// promises: a tile is marked uploaded only when the provider answered it
// accepted or duplicate, or, asked about it, says it holds its bytes; only
// a clear "rejected", or a tile the provider says it does not hold after an
// unclear answer, is a rejection; each batch is journaled under one operation ID
// before its first byte is sent and every resend reuses that ID and body;
// batches an earlier run left unsettled are settled before new ones form.
// With a client ID (strict client sequencing, sequence.go), each batch's
// Client-Sequence is journaled with it and resent unchanged (or as the
// provider's state rebinds it after SEQUENCE_GAP), one batch in flight.
package uploader

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// TileUploader uploads the pending tiles of a flight.
//
// UploadPendingTiles returns a report and a nil error when every batch got an
// answer (Outcome success or partial). A run-level failure (flight not on
// ground, provider unreachable after retries, 401/403, 413, 422 on a key,
// database down, context cancelled) is returned as a typed error, with a
// report (Outcome failure) of what was done before it.
type TileUploader interface {
	UploadPendingTiles(ctx context.Context, req Request) (Report, error)
	EnumeratePendingTiles(ctx context.Context, flightID string) iter.Seq2[tilestore.Tile, error]
	ConfirmFlightState(ctx context.Context, flightID string) error
}

// Request says what to upload and how.
type Request struct {
	FlightID string
	// BatchSize caps tiles per batch; 0 means the provider's max_batch_tiles.
	BatchSize int
	// Concurrency is how many batches are in flight at once; 0 means
	// adaptive (the uploader's concurrency.Controller decides from what it
	// measures). With a client ID it is 1 whatever is asked.
	Concurrency int
	// DryRun reports what would be sent; nothing is sent or changed.
	DryRun bool
	// Progress, if set, is told about every settled batch. It must be safe
	// for concurrent use and must not block.
	Progress func(BatchProgress)
	// SettledOpen, if set, is called after the batches an earlier run left
	// open were settled and before any new batch forms, from the goroutine
	// running UploadPendingTiles; an error ends the call. The retry
	// decorator counts there (retrydecorator.Inner has the whole contract).
	SettledOpen func(ctx context.Context) error
	// Settling, if set, is told when the run starts settling the batches
	// an earlier run left open (Done false) and when it has finished with
	// them (Done true, also when settling failed), from the goroutine
	// running UploadPendingTiles. It is not called when there are none. It
	// must not block.
	Settling func(SettlingProgress)
	// Waiting, if set, is told when a wait the provider advised starts:
	// a batch waits in the run (PastDeadline false) or is left open for
	// a later run. It must be safe for concurrent use and must not block.
	Waiting func(Wait)
	// MaxAttempts, if positive, is the per-tile budget: a tile whose counted
	// attempts plus uncounted rejections reach it is not sent. A run without
	// the retry decorator counts nothing, so it sets this to keep a tile the
	// next count will give up from travelling under one more key.
	MaxAttempts int
	// Holding, if set, is told what other runs hold while the run waits
	// for it (see Held), each time it looks again, and Held{} when the
	// wait ends. It must not block.
	Holding func(Held)
	// Order is the order the flight's tiles are claimed in; "" is
	// tilestore.OrderZoom, the overview first (see tilestore's claimSQL
	// for what the order promises).
	Order tilestore.Order
}

// BatchProgress is one settled (or failed) batch, for progress displays.
type BatchProgress struct {
	OpID     string
	Tiles    int
	Bytes    int64
	Uploaded int
	Rejected int
	Replayed bool
	Latency  time.Duration
	Resends  int
	// Concurrency is the limit on batches in flight when the batch settled.
	Concurrency int
}

// SettlingProgress is the settling of the batches an earlier run left
// open, for progress displays.
type SettlingProgress struct {
	Open int  // how many open batches this run adopted
	Done bool // false when settling starts, true when it has finished
}

// Outcome summarises a run.
type Outcome string

const (
	// OutcomeSuccess: every tile the run attempted is uploaded.
	OutcomeSuccess Outcome = "success"
	// OutcomePartial: every batch was answered but some tiles were rejected
	// or not clearly answered, or not sent because of their cached blob;
	// they are still pending.
	OutcomePartial Outcome = "partial"
	// OutcomeFailure: the run stopped on a run-level error.
	OutcomeFailure Outcome = "failure"
)

// TileStatus is what happened to one tile in a run.
type TileStatus string

const (
	TileAccepted  TileStatus = "accepted"
	TileDuplicate TileStatus = "duplicate"
	TileRejected  TileStatus = "rejected"
)

// ReasonProtocolError is the rejection the client records for a tile a 200
// did not clearly answer and the provider, asked, does not hold (404
// TILE_NOT_FOUND, or other bytes). A bad cached blob is not a rejection at all: see
// LocalFailure.
const ReasonProtocolError = tilestore.ReasonProtocolError

// PerTileStatus is one tile's result. Reports list rejected tiles only;
// accepted and duplicate tiles are counted, so a report stays small however
// many tiles a flight has.
type PerTileStatus struct {
	TileID  string     `json:"tile_id"`
	Status  TileStatus `json:"status"`
	Reason  string     `json:"reason,omitempty"`
	Message string     `json:"message,omitempty"`
	OpID    string     `json:"op_id,omitempty"`
}

// Report is the result of one UploadPendingTiles call (or, from the
// decorator, of all its inner calls together).
type Report struct {
	FlightID  string  `json:"flight_id"`
	Outcome   Outcome `json:"outcome"`
	Accepted  int     `json:"accepted"`
	Duplicate int     `json:"duplicate"`
	// Rejected counts every rejection the call recorded in the store
	// (retrydecorator.Inner says what the decorator makes of it).
	Rejected int `json:"rejected"`
	GivenUp  int `json:"given_up"`
	// Pending is the flight's tiles still pending after the run, counted
	// in the store as the call ends (PendingSummary), with PendingBytes
	// their bytes (a real run's count; 0 in a dry run, which reports what
	// it would send in Bytes). The retry decorator takes them as the
	// flight's count (retrydecorator.Inner).
	Pending      int   `json:"pending"`
	PendingBytes int64 `json:"pending_bytes"`
	Bytes        int64 `json:"bytes"`
	Batches      int   `json:"batches"`
	Resends      int   `json:"resends"`  // transport-level resends
	Replayed     int   `json:"replayed"` // answers with Idempotent-Replayed
	Timeouts     int   `json:"timeouts"`
	RetryCount   int   `json:"retry_count"` // decorator's in-call retries
	// Concurrency is the limit on batches in flight as the call ended
	// (adaptive or fixed; 0 when nothing was sent).
	Concurrency int `json:"concurrency"`
	Traffic
	// NextRetryAt is when a later run may go on: set when all the work
	// left waits (Blocked) or, by the retry decorator, when its in-call
	// budget ran out with tiles pending.
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
	// Waiting lists the batches left open waiting for the provider's
	// advised time as the call ended, earliest Until first: those whose
	// time comes after the call's deadline, and those whose resend the
	// deadline found not yet on the wire (waiting for their time or, their
	// time come, for a slot of the limit on batches in flight, the circuit
	// breaker's cool-down or the pacer; their Until may then be past: the
	// next run may send them at once).
	Waiting []Wait `json:"waiting,omitempty"`
	// WaitsBehind says the call's sends stopped behind a batch of its own
	// in Waiting that holds the client's next number (a strict client
	// sequence): no tile left can go before it, so all of them wait with
	// it (Blocked).
	WaitsBehind bool `json:"-"`
	// Held is the remaining work other runs still held when the run's
	// deadline ended its wait for it (their tiles are in Pending); nil when
	// the run waited for none or saw it through.
	Held       *Held           `json:"held,omitempty"`
	Rejections []PerTileStatus `json:"rejections,omitempty"`
	// LocalFailed counts the tiles not sent because of their cached blob
	// (missing, unreadable, wrong size or sha256); they stay pending and
	// never count as attempts. LocalFailures lists them (at most 1000).
	LocalFailed   int            `json:"local_failed"`
	LocalFailures []LocalFailure `json:"local_failures,omitempty"`
	Started       time.Time      `json:"started"`
	Finished      time.Time      `json:"finished"`

	// FDRRecords and FDRBytes are the give-up records the retry decorator
	// wrote to the flight data recorder and their size in the ring: more
	// bytes than the ring's capacity means the oldest were overwritten.
	FDRRecords int   `json:"fdr_records"`
	FDRBytes   int64 `json:"fdr_bytes"`
}

// Traffic counts a run's HTTP requests for the retry SLIs (README, "Retry
// SLIs"). Every
// request the uploader makes is counted, GETs included; Resends and
// Timeouts of Report count the same population.
type Traffic struct {
	Requests        int `json:"requests"`         // HTTP attempts sent, resends included
	FirstAttempts   int `json:"first_attempts"`   // requests that were not resends
	ResendsRefused  int `json:"resends_refused"`  // resends the run's retry budget refused
	BreakerOpenings int `json:"breaker_openings"` // times the circuit breaker opened
}

// Add adds o's counts.
func (t *Traffic) Add(o Traffic) {
	t.Requests += o.Requests
	t.FirstAttempts += o.FirstAttempts
	t.ResendsRefused += o.ResendsRefused
	t.BreakerOpenings += o.BreakerOpenings
}

// Uploaded is how many tiles are now safely at the provider.
func (r Report) Uploaded() int { return r.Accepted + r.Duplicate }

// ErrFlightNotOnGround is matched by FlightStateNotOnGroundError.
var ErrFlightNotOnGround = errors.New("flight is not on ground")

// FlightStateNotOnGroundError: uploads wait until the aircraft has landed.
type FlightStateNotOnGroundError struct {
	FlightID string
	State    tilestore.FlightState
}

func (e *FlightStateNotOnGroundError) Error() string {
	return fmt.Sprintf("flight %s is %s: tiles are uploaded only once it is on_ground "+
		"(once the aircraft has landed: tilectl flights land %s)", e.FlightID, e.State, e.FlightID)
}

func (e *FlightStateNotOnGroundError) Is(target error) bool { return target == ErrFlightNotOnGround }

// ProviderError is a run-ending answer from the provider (401, 403, 404, 413,
// 422, or a retryable error that outlasted its budget).
type ProviderError struct {
	Status  int    // HTTP status, 0 when no answer came
	Code    string // the error code from the body, or "" when unparsable
	Message string
	OpID    string // the batch concerned, if any
	Err     error  // the transport error when Status is 0
}

func (e *ProviderError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("provider unreachable (batch %s): %v", e.OpID, e.Err)
	}
	msg := fmt.Sprintf("provider answered %d %s", e.Status, e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.OpID != "" {
		msg += " (batch " + e.OpID + ")"
	}
	if hint := statusHint(e.Status, e.Code); hint != "" {
		msg += "; " + hint
	}
	return msg
}

func (e *ProviderError) Unwrap() error { return e.Err }

func statusHint(status int, code string) string {
	switch {
	case status == 401:
		return "check the provider token"
	case status == 403:
		return "the token has no rights to this flight"
	case status == 413:
		return "lower --batch-size"
	case code == "IDEMPOTENCY_EXPIRED":
		return "the batch's key is past the provider's retention; see docs/operations.md"
	case code == "IDEMPOTENCY_CONFLICT":
		return "the provider holds this key for a different body; see docs/operations.md"
	case code == "IDEMPOTENCY_PROCESSING":
		return "the provider holds this batch's key as still processing; the batch stays open and the next run " +
			"resends it under the same key (if every run ends here, see docs/operations.md)"
	}
	return ""
}

// ErrNoSequencing: a client ID is configured but the provider does not
// offer strict client sequencing.
var ErrNoSequencing = errors.New("the provider does not offer strict client sequencing")
