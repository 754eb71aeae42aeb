package tilestore_test

import (
	"errors"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func TestFlightCountsCountsEveryStatusPerFlight(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 5)
	seedFlight(t, s, "F2", 2)
	if _, err := s.UpsertFlight(ctx, "F3", tilestore.FlightAirborne); err != nil {
		t.Fatal(err)
	}
	setStatusSQL(t, s, "uploaded", ids[0], ids[1])
	setStatusSQL(t, s, "upload_giveup", ids[2])

	all, err := s.FlightCounts(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].FlightID != "F1" || all[1].FlightID != "F2" || all[2].FlightID != "F3" {
		t.Fatalf("flights = %+v, want F1 F2 F3", all)
	}
	f1 := all[0].ByStatus
	if f1[tilestore.StatusUploaded] != 2 || f1[tilestore.StatusUploadGiveup] != 1 || f1[tilestore.StatusPending] != 2 || f1[tilestore.StatusTrusted] != 0 {
		t.Errorf("F1 counts = %v", f1)
	}
	if len(f1) != 5 {
		t.Errorf("F1 has %d statuses, want all 5 (zeros included)", len(f1))
	}
	if all[2].State != tilestore.FlightAirborne || all[2].ByStatus[tilestore.StatusPending] != 0 {
		t.Errorf("F3 = %+v, want airborne with no tiles", all[2])
	}
	one, err := s.FlightCounts(ctx, "F2")
	if err != nil || len(one) != 1 || one[0].ByStatus[tilestore.StatusPending] != 2 {
		t.Errorf("F2 = %+v, %v", one, err)
	}
	if _, err := s.FlightCounts(ctx, "F9"); !errors.Is(err, tilestore.ErrFlightNotFound) {
		t.Errorf("unknown flight: err = %v", err)
	}
}

func TestGiveUpsListsNewestFirst(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)
	if _, err := s.Pool().Exec(ctx, `UPDATE tiles SET voting_status = 'upload_giveup', upload_attempts = 5,
		last_rejection_reason = 'bad_tile', gave_up_at = now() - interval '1 minute' * x
		WHERE tile_id = ANY($1)`, ids[:3]); err != nil {
		t.Fatal(err)
	}
	got, err := s.GiveUps(ctx, "F1", 2)
	if err != nil {
		t.Fatal(err)
	}
	// x is the tile index: tile 0 gave up most recently.
	if len(got) != 2 || got[0].TileID != ids[0] || got[1].TileID != ids[1] || got[0].Attempts != 5 || got[0].LastReason != "bad_tile" {
		t.Errorf("give-ups = %+v, want %s then %s", got, ids[0], ids[1])
	}
	if !got[0].GaveUpAt.After(got[1].GaveUpAt) {
		t.Errorf("not newest first: %v then %v", got[0].GaveUpAt, got[1].GaveUpAt)
	}
	if all, err := s.GiveUps(ctx, "", 0); err != nil || len(all) != 3 {
		t.Errorf("all give-ups = %d, %v; want 3", len(all), err)
	}
}
