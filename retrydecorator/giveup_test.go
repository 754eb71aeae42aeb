package retrydecorator

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

func TestTileAtMaxAttemptsGivesUpWithOneDurableFDRRecordAndOneErrorLog(t *testing.T) {
	st := newMemStore(flight, "bad", "good")
	st.tiles["bad"].attempts = 4
	var sentBad int
	inner := scriptedInner(st, func(_ int, id string) bool {
		if id == "bad" {
			sentBad++
		}
		return id == "bad"
	})
	var hooked []tilestore.GiveUp
	r := newRig(t, st, inner, defaultConfig(), Hooks{OnGiveUp: func(g tilestore.GiveUp) { hooked = append(hooked, g) }})

	got, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
	if err != nil {
		t.Fatal(err)
	}
	if s := st.tile("bad"); s.status != tilestore.StatusUploadGiveup || s.attempts != 5 {
		t.Errorf("bad tile %+v, want upload_giveup with 5 attempts", s)
	}
	if sentBad != 1 || inner.calls != 1 {
		t.Errorf("bad tile sent %d times in %d calls, want once: pending excludes given-up tiles", sentBad, inner.calls)
	}
	if got.GivenUp != 1 || got.Outcome != uploader.OutcomePartial {
		t.Errorf("report given_up %d outcome %s, want 1 partial", got.GivenUp, got.Outcome)
	}
	if len(r.rec.records) != 1 || !r.rec.durable[0] {
		t.Fatalf("FDR records %+v (durable %v), want exactly one durable record", r.rec.records, r.rec.durable)
	}
	rec := r.rec.records[0]
	if rec.Kind != "upload.giveup" || rec.Key != "giveup/bad/1" {
		t.Errorf("record kind %q key %q, want upload.giveup giveup/bad/1 (the first give-up of tile bad)", rec.Kind, rec.Key)
	}
	var p map[string]any
	if err := json.Unmarshal(rec.Payload, &p); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"tile_id": "bad", "flight_id": flight, "attempts": 5.0,
		"last_rejection_reason": "invalid_tile", "last_rejection_message": "msg bad", "gave_up_at": t0.Format("2006-01-02T15:04:05Z07:00")} {
		if p[k] != want {
			t.Errorf("payload[%s] = %v, want %v", k, p[k], want)
		}
	}
	errs := r.logs.withMessage(t, "error", "upload_giveup")
	if len(errs) != 1 || errs[0]["tile_id"] != "bad" || errs[0]["attempts"] != 5.0 {
		t.Errorf("ERROR give-up log lines %v, want exactly one for tile bad", errs)
	}
	if len(hooked) != 1 || hooked[0].TileID != "bad" {
		t.Errorf("OnGiveUp calls %+v, want one for bad", hooked)
	}
}

func TestGiveUpCrashBetweenFDRWriteAndCommitLeavesExactlyOneRecord(t *testing.T) {
	st := newMemStore(flight, "bad")
	st.tiles["bad"].attempts = 4
	st.settle("op-1", nil, map[string]string{"bad": "invalid_tile"})
	st.commitErr = errors.New("connection lost during commit")
	idle := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		return uploader.Report{FlightID: flight, Outcome: uploader.OutcomeSuccess}, nil
	}}
	r := newRig(t, st, idle, defaultConfig(), Hooks{})

	// Run 1: the FDR record is written, the commit fails.
	if _, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight}); err == nil {
		t.Fatal("run 1: want the commit error")
	}
	if s := st.tile("bad"); s.status != tilestore.StatusPending || s.attempts != 4 {
		t.Fatalf("after failed commit tile is %+v, want untouched (pending, 4)", s)
	}
	if len(r.rec.records) != 1 {
		t.Fatalf("after run 1: %d FDR records, want 1", len(r.rec.records))
	}
	if n := len(r.logs.withMessage(t, "error", "upload_giveup")); n != 0 {
		t.Errorf("ERROR give-up logged %d times for an uncommitted give-up, want 0", n)
	}

	// Run 2: the recount reaches the same give-up; the key dedupes.
	if _, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight}); err != nil {
		t.Fatalf("run 2: %v", err)
	}
	if s := st.tile("bad"); s.status != tilestore.StatusUploadGiveup || s.attempts != 5 {
		t.Errorf("after run 2 tile is %+v, want upload_giveup with 5", s)
	}
	if r.rec.appends != 2 || len(r.rec.records) != 1 || r.rec.records[0].Key != "giveup/bad/1" {
		t.Errorf("appends %d records %+v, want 2 appends and one record giveup/bad/1", r.rec.appends, r.rec.records)
	}
	if n := len(r.logs.withMessage(t, "error", "upload_giveup")); n != 1 {
		t.Errorf("ERROR give-up logged %d times, want 1", n)
	}
}

func TestGiveUpIsNotCommittedWhenTheFDRWriteFails(t *testing.T) {
	st := newMemStore(flight, "bad")
	st.tiles["bad"].attempts = 4
	st.settle("op-1", nil, map[string]string{"bad": "invalid_tile"})
	inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		t.Error("inner called after the count failed")
		return uploader.Report{}, nil
	}}
	r := newRig(t, st, inner, defaultConfig(), Hooks{})
	diskFull := errors.New("no space left on device")
	r.rec.AppendFunc = func(ctx context.Context, e fdr.Entry) error { return diskFull }

	got, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
	if !errors.Is(err, diskFull) {
		t.Fatalf("err %v, want the FDR write error", err)
	}
	if got.Outcome != uploader.OutcomeFailure || got.GivenUp != 0 {
		t.Errorf("report outcome %s given_up %d, want failure 0", got.Outcome, got.GivenUp)
	}
	if s := st.tile("bad"); s.status != tilestore.StatusPending || s.attempts != 4 || len(st.uncounted) != 1 {
		t.Errorf("tile %+v uncounted %d, want nothing committed", s, len(st.uncounted))
	}
}
