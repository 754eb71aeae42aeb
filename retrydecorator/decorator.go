// Package retrydecorator wraps any uploader.TileUploader with bounded
// in-call retries of partial uploads and a per-tile attempt budget.
//
// It promises: the inner uploader is called at most 1+MaxInCallRetries
// times per call, in a loop (never recursion); every rejection the inner
// uploader recorded is counted exactly once, in one store transaction per
// count; a tile that reaches MaxPerTileAttempts (or is rejected
// tilestore.ReasonTooLarge, which no retry can help) moves to upload_giveup in
// that same transaction, and its durable flight-data record is written
// before the transaction commits, under a key that makes a rewrite after a
// crash a no-op; a cancelled context ends a backoff sleep at once. It reports
// retries and give-ups through Hooks and its logger, never by printing.
package retrydecorator

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// Inner is the uploader the decorator wraps (*uploader.Client
// in tilectl). This is the whole of what the decorator relies on; an
// uploader that keeps these promises can be wrapped, and one that breaks
// any of them breaks the decorator's exactly-once counting.
//
// UploadPendingTiles:
//
//   - Records every rejection before reporting it. Each tile the provider
//     rejected during the call is journaled as an uncounted rejection
//     (tilestore) before the call returns, and report.Rejected counts
//     every rejection the call recorded. A call that returns no error and
//     Rejected == 0 recorded none: the decorator then skips its count. A
//     call that returns an error may have recorded some: the decorator
//     counts after it anyway.
//   - Calls req.SettledOpen, when set, once: after settling the batches an
//     earlier run left open and before forming any new batch, on the
//     goroutine running UploadPendingTiles; an error from it ends the
//     call with that error. The decorator counts there, so a tile the
//     settlements brought to its budget gives up before it can be sent
//     again.
//   - Forms batches only from the flight's pending tiles as the store has
//     them at each claim: a retry sends only unanswered or rejected tiles,
//     never an uploaded or given-up one.
//   - Reports an Outcome of success (every tile it attempted is uploaded),
//     partial (every batch was answered, some tiles are still pending) or
//     failure (with a non-nil error; a run-level stop).
//   - Fills Pending and PendingBytes with the flight's pending tiles as the
//     call ended (tilestore's PendingSummary): the decorator counts again
//     only when its own count of rejections has just given tiles up.
//   - Counts in LocalFailed the pending tiles it did not send for their
//     cached blob: another call would find them bad too.
//   - Says through report.Blocked when the work left must wait past the
//     call's deadline (the provider's advised time, or other runs'
//     batches): the decorator then ends instead of retrying.
//   - Changes nothing with req.DryRun.
//
// EnumeratePendingTiles and ConfirmFlightState are passed through.
type Inner interface {
	UploadPendingTiles(ctx context.Context, req uploader.Request) (uploader.Report, error)
	EnumeratePendingTiles(ctx context.Context, flightID string) iter.Seq2[tilestore.Tile, error]
	ConfirmFlightState(ctx context.Context, flightID string) error
}

var _ Inner = uploader.TileUploader(nil)

// RejectionCounter is the part of *tilestore.Store the decorator needs.
//
// CountRejectionsUpTo must, in one transaction, take the first maxTiles
// tiles (tile_id order) after the tile ID after ("" for the first) with
// uncounted rejections of the flight, name the last it took in Last, add
// those rejections to their tiles' upload_attempts, mark them counted, move tiles
// at maxAttempts to upload_giveup (with the next give-up Generation), call
// beforeCommit with them, and commit only if beforeCommit returned nil.
// PendingSummary counts the flight's uploadable tiles.
type RejectionCounter interface {
	CountRejectionsUpTo(ctx context.Context, flightID string, maxAttempts, maxTiles int, after string,
		beforeCommit func(ctx context.Context, gaveUp []tilestore.GiveUp) error) (tilestore.CountResult, error)
	PendingSummary(ctx context.Context, flightID string) (tiles int, bytes int64, err error)
}

// GiveUpRecorder is the flight data recorder as the decorator needs it:
// *fdr.Recorder through RingRecorder. Begin takes the ring's write lock,
// taking a free one even after ctx ended but waiting for a busy one only
// while ctx allows. Capacity is the ring's record area in bytes.
type GiveUpRecorder interface {
	Begin(ctx context.Context) (GiveUpBatch, error)
	Capacity() int64
}

// GiveUpBatch is the ring held for writing (*fdr.Batch). Append with a Key
// already in the ring must return the existing record and write nothing;
// Append must refuse, and Sync must fail, with fdr.ErrBatchOverflow when
// a record the batch returned would be, or was, overwritten; Sync makes
// every record durable; Written counts the records and bytes the batch
// wrote; Release lets other writers in.
type GiveUpBatch interface {
	Append(e fdr.Entry) (fdr.Record, error)
	Sync() error
	Written() (records int, bytes int64)
	Release()
}

// RingRecorder is an *fdr.Recorder as a GiveUpRecorder.
type RingRecorder struct{ *fdr.Recorder }

var _ GiveUpRecorder = RingRecorder{}

// Begin is fdr.Recorder.Begin.
func (r RingRecorder) Begin(ctx context.Context) (GiveUpBatch, error) {
	b, err := r.Recorder.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Clock is the decorator's time. Sleep must return ctx.Err() as soon as ctx
// is done.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// RetryEvent describes one retry, told to Hooks.OnRetry before its sleep.
type RetryEvent struct {
	FlightID     string
	Attempt      int           // 1 for the first retry
	Sleep        time.Duration // the backoff about to be slept
	Pending      int           // tiles still pending
	PendingBytes int64
	Rejected     int // tiles the last inner call rejected
}

// Hooks are told what the decorator does. Each may be nil. They are called
// from the goroutine running UploadPendingTiles and must not block.
type Hooks struct {
	OnRetry  func(RetryEvent)
	OnGiveUp func(tilestore.GiveUp)
}

// Uploader is a TileUploader that retries the inner uploader's partial
// outcomes. It holds no per-call state, so one value may serve concurrent
// calls for different flights.
type Uploader struct {
	inner Inner
	store RejectionCounter
	rec   GiveUpRecorder
	log   zerolog.Logger
	clock Clock
	cfg   Config
	hooks Hooks
}

var _ uploader.TileUploader = (*Uploader)(nil)

// New wraps inner. cfg must pass Validate (New panics otherwise: a bad
// config is a programming error by the time it gets here; commands validate
// user input first).
func New(inner Inner, store RejectionCounter, rec GiveUpRecorder,
	log zerolog.Logger, clock Clock, cfg Config, hooks Hooks) *Uploader {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("retrydecorator.New: %v", err))
	}
	if cfg.Jitter == "" {
		cfg.Jitter = operation.JitterNone
	}
	return &Uploader{inner: inner, store: store, rec: rec,
		log: log, clock: clock, cfg: cfg, hooks: hooks}
}

// EnumeratePendingTiles is the inner uploader's.
func (u *Uploader) EnumeratePendingTiles(ctx context.Context, flightID string) iter.Seq2[tilestore.Tile, error] {
	return u.inner.EnumeratePendingTiles(ctx, flightID)
}

// ConfirmFlightState is the inner uploader's.
func (u *Uploader) ConfirmFlightState(ctx context.Context, flightID string) error {
	return u.inner.ConfirmFlightState(ctx, flightID)
}
