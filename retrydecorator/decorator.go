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

// IdempotentRetryTileUploader is a TileUploader that retries the inner
// uploader's partial outcomes. It holds no per-call state, so one value may
// serve concurrent calls for different flights.
type IdempotentRetryTileUploader struct {
	inner uploader.TileUploader
	store RejectionCounter
	rec   GiveUpRecorder
	log   zerolog.Logger
	clock Clock
	cfg   Config
	hooks Hooks
}

var _ uploader.TileUploader = (*IdempotentRetryTileUploader)(nil)

// New wraps inner. cfg must pass Validate (New panics otherwise: a bad
// config is a programming error by the time it gets here; commands validate
// user input first).
func New(inner uploader.TileUploader, store RejectionCounter, rec GiveUpRecorder,
	log zerolog.Logger, clock Clock, cfg Config, hooks Hooks) *IdempotentRetryTileUploader {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("retrydecorator.New: %v", err))
	}
	if cfg.Jitter == "" {
		cfg.Jitter = operation.JitterNone
	}
	return &IdempotentRetryTileUploader{inner: inner, store: store, rec: rec,
		log: log, clock: clock, cfg: cfg, hooks: hooks}
}

// EnumeratePendingTiles is the inner uploader's.
func (u *IdempotentRetryTileUploader) EnumeratePendingTiles(ctx context.Context, flightID string) iter.Seq2[tilestore.Tile, error] {
	return u.inner.EnumeratePendingTiles(ctx, flightID)
}

// ConfirmFlightState is the inner uploader's.
func (u *IdempotentRetryTileUploader) ConfirmFlightState(ctx context.Context, flightID string) error {
	return u.inner.ConfirmFlightState(ctx, flightID)
}
