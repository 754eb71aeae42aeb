package retrydecorator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/tilestore"
)

// countTimeout bounds one chunk of a count of rejections.
const countTimeout = 30 * time.Second

// GiveUpKind is the FDR record kind of a give-up.
const GiveUpKind = "upload.giveup"

// GiveUpPayload is the FDR payload of a give-up: what a safety officer needs
// to decide whether to move the tile back to pending by hand.
type GiveUpPayload struct {
	TileID               string    `json:"tile_id"`
	FlightID             string    `json:"flight_id"`
	Attempts             int       `json:"attempts"`
	LastRejectionReason  string    `json:"last_rejection_reason"`
	LastRejectionMessage string    `json:"last_rejection_message"`
	GaveUpAt             time.Time `json:"gave_up_at"`
}

// GiveUpKey is the FDR idempotency key of a give-up: the tile and the
// give-up's generation (tilestore.GiveUp.Generation), which names the
// give-up itself. A crash between the FDR write and the store commit,
// followed by a recount that reaches the same give-up (even at a higher
// attempt count, after another rejection was recorded), finds the record
// already there instead of writing a second one.
func GiveUpKey(tileID string, generation int) string {
	return fmt.Sprintf("giveup/%s/%d", tileID, generation)
}

// Chunk sizing: a count commits at most chunkTiles tiles per transaction,
// so that all the give-up records a commit depends on are in the ring at
// once; chunkTiles is half the ring over the records' size (a guess until
// a chunk has written some).
const (
	guessRecordBytes = 512
	maxChunkTiles    = 10000
)

func chunkTiles(capacity, recordBytes int64) int {
	return int(max(1, min(maxChunkTiles, capacity/2/max(recordBytes, 1))))
}

// count adds the flight's uncounted rejections to their tiles' attempts,
// recording give-ups in the FDR before the store commits them, and reports
// committed give-ups (ERROR log, OnGiveUp) only after the commit.
//
// It counts in chunks of tiles, one transaction each. Before a chunk's
// transaction begins it takes the ring's write lock (waiting only while
// the run's ctx allows, so no transaction sits idle holding row locks while
// another process holds the ring) and keeps it until the commit: the
// chunk's records are written with one fdatasync and are all in the ring
// when the give-ups commit. A chunk whose records would not fit is rolled
// back and retried with half as many tiles. Each chunk resumes after the
// last tile the one before counted, so a mass give-up costs the same per
// tile however large it is.
func (u *Uploader) count(ctx context.Context, flightID string, agg *aggregate) (tilestore.CountResult, error) {
	total := tilestore.CountResult{Attempts: map[string]int{}}
	per := chunkTiles(u.rec.Capacity(), guessRecordBytes)
	after := ""
	for {
		recs, bytes, res, err := u.countChunk(ctx, flightID, per, after)
		agg.fdrRecords += recs
		agg.fdrBytes += bytes
		if errors.Is(err, fdr.ErrBatchOverflow) && per > 1 {
			per /= 2
			continue
		}
		if err != nil {
			return total, fmt.Errorf("count upload rejections of flight %s: %w", flightID, err)
		}
		total.Counted += res.Counted
		maps.Copy(total.Attempts, res.Attempts)
		total.GaveUp = append(total.GaveUp, res.GaveUp...)
		u.reportGiveUps(res.GaveUp, agg)
		if len(res.Attempts) < per {
			return total, nil
		}
		after = res.Last
		if ctx.Err() != nil {
			// The run is over: what is left stays uncounted, and the next
			// run counts it before it sends anything.
			return total, nil
		}
		if recs > 0 {
			per = chunkTiles(u.rec.Capacity(), bytes/int64(recs))
		}
	}
}

// countChunk is one chunk of count: at most per tiles after the tile ID
// after, one transaction,
// under the ring's write lock, taken before the transaction begins.
func (u *Uploader) countChunk(ctx context.Context, flightID string, per int, after string) (
	recs int, bytes int64, res tilestore.CountResult, err error) {
	// A chunk is a short transaction over answers already recorded: it
	// runs even when the run's deadline or a Ctrl-C has just ended the
	// inner call, so what that call recorded is counted now, not left to a
	// later run (bounded, so a dead database cannot hold the exit).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), countTimeout)
	defer cancel()
	// The wait for the ring's lock is not: it ends with the run.
	lctx, lcancel := context.WithCancelCause(cctx)
	defer lcancel(nil)
	defer context.AfterFunc(ctx, func() { lcancel(context.Cause(ctx)) })()
	b, err := u.rec.Begin(lctx)
	if err != nil {
		return 0, 0, res, fmt.Errorf("flight data recorder: %w", err)
	}
	defer b.Release()
	res, err = u.store.CountRejectionsUpTo(cctx, flightID, u.cfg.MaxPerTileAttempts, per, after,
		func(_ context.Context, gaveUp []tilestore.GiveUp) error { return recordGiveUps(b, gaveUp) })
	recs, bytes = b.Written()
	return recs, bytes, res, err
}

// reportGiveUps tells of committed give-ups.
func (u *Uploader) reportGiveUps(gaveUp []tilestore.GiveUp, agg *aggregate) {
	agg.givenUp += len(gaveUp)
	for _, g := range gaveUp {
		u.log.Error().Str("flight_id", g.FlightID).Str("tile_id", g.TileID).
			Int("attempts", g.Attempts).Str("last_rejection_reason", g.LastReason).
			Str("last_rejection_message", g.LastMessage).Time("gave_up_at", g.GaveUpAt).
			Msg("tile moved to upload_giveup after too many rejected uploads; it needs human review")
		if u.hooks.OnGiveUp != nil {
			u.hooks.OnGiveUp(g)
		}
	}
}

// recordGiveUps is a chunk's beforeCommit: one FDR record per give-up, all
// made durable by one sync. Any failure aborts the store transaction, so a
// give-up is never committed without its record.
func recordGiveUps(b GiveUpBatch, gaveUp []tilestore.GiveUp) error {
	for _, g := range gaveUp {
		_, err := b.Append(fdr.Entry{
			Kind:    GiveUpKind,
			Key:     GiveUpKey(g.TileID, g.Generation),
			Durable: true,
			Payload: GiveUpPayload{
				TileID:               g.TileID,
				FlightID:             g.FlightID,
				Attempts:             g.Attempts,
				LastRejectionReason:  g.LastReason,
				LastRejectionMessage: g.LastMessage,
				GaveUpAt:             g.GaveUpAt,
			},
		})
		if err != nil {
			return fmt.Errorf("record give-up of tile %s in the flight data recorder: %w", g.TileID, err)
		}
	}
	if err := b.Sync(); err != nil {
		return fmt.Errorf("sync %d give-up records to the flight data recorder: %w", len(gaveUp), err)
	}
	return nil
}
