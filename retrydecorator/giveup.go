package retrydecorator

import (
	"context"
	"fmt"
	"time"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/tilestore"
)

// countTimeout bounds one count of rejections.
const countTimeout = 30 * time.Second

// GiveUpKind is the FDR record kind of a give-up.
const GiveUpKind = "c11.upload.giveup"

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

// GiveUpKey is the FDR idempotency key of a give-up. It names the attempt
// count so a crash between the FDR write and the store commit, followed by
// a recount that reaches the same give-up, finds the record already there.
func GiveUpKey(tileID string, attempts int) string {
	return fmt.Sprintf("giveup/%s/%d", tileID, attempts)
}

// count adds the flight's uncounted rejections to their tiles' attempts,
// recording give-ups in the FDR before the store commits them, and reports
// committed give-ups (ERROR log, OnGiveUp) only after the commit.
func (u *IdempotentRetryTileUploader) count(ctx context.Context, flightID string, agg *aggregate) (tilestore.CountResult, error) {
	// Counting is one short transaction over answers already recorded: it
	// runs even when the run's deadline or a Ctrl-C has just ended the
	// inner call, so what that call recorded is counted now, not left to a
	// later run (bounded, so a dead database cannot hold the exit).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), countTimeout)
	defer cancel()
	res, err := u.store.CountRejections(cctx, flightID, u.cfg.MaxPerTileAttempts, u.recordGiveUps)
	if err != nil {
		return res, fmt.Errorf("count upload rejections of flight %s: %w", flightID, err)
	}
	agg.givenUp += len(res.GaveUp)
	for _, g := range res.GaveUp {
		u.log.Error().Str("flight_id", g.FlightID).Str("tile_id", g.TileID).
			Int("attempts", g.Attempts).Str("last_rejection_reason", g.LastReason).
			Str("last_rejection_message", g.LastMessage).Time("gave_up_at", g.GaveUpAt).
			Msg("tile moved to upload_giveup after too many rejected uploads; it needs human review")
		if u.hooks.OnGiveUp != nil {
			u.hooks.OnGiveUp(g)
		}
	}
	return res, nil
}

// recordGiveUps is CountRejections' beforeCommit: one durable FDR record per
// give-up. Any failure aborts the store transaction, so a give-up is never
// committed without its record.
func (u *IdempotentRetryTileUploader) recordGiveUps(ctx context.Context, gaveUp []tilestore.GiveUp) error {
	for _, g := range gaveUp {
		_, err := u.rec.Append(ctx, fdr.Entry{
			Kind:    GiveUpKind,
			Key:     GiveUpKey(g.TileID, g.Attempts),
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
	return nil
}
