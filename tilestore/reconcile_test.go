package tilestore_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func TestUploadedPagesOnlyTheFlightsUploadedTilesInOrder(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FR-1", 7)
	seedFlight(t, s, "FR-2", 3)
	setStatusSQL(t, s, "uploaded", ids[0], ids[2], ids[3], ids[6])
	var got []string
	after := ""
	for {
		page, err := s.Uploaded(ctx, "FR-1", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range page {
			got = append(got, tl.ID)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	if want := []string{ids[0], ids[2], ids[3], ids[6]}; !slices.Equal(got, want) {
		t.Fatalf("Uploaded pages = %v, want %v", got, want)
	}
}

func TestRequeueUploadedMovesOnlyUploadedTilesBackToPendingWithAFreshBudget(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "FR-3", 4)
	setStatusSQL(t, s, "uploaded", ids[0], ids[1])
	if _, err := s.Pool().Exec(ctx, `UPDATE tiles SET upload_attempts = 2, uploaded_at = now() WHERE tile_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	var seen []tilestore.Requeued
	rs, err := s.RequeueUploaded(ctx, "FR-3", []string{ids[0], ids[2]}, func(_ context.Context, rs []tilestore.Requeued) error {
		seen = rs
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].TileID != ids[0] || rs[0].PreviousAttempts != 2 || rs[0].Requeues != 1 || len(seen) != 1 {
		t.Fatalf("requeued %+v (hook saw %d), want only %s with 2 previous attempts", rs, len(seen), ids[0])
	}
	if r := readTile(t, s, ids[0]); r.Status != "pending" || r.UploadedAt != nil {
		t.Fatalf("requeued tile: status %s, uploaded_at %v; want pending and no uploaded_at", r.Status, r.UploadedAt)
	}
	if r := readTile(t, s, ids[1]); r.Status != "uploaded" {
		t.Fatalf("tile not named: status %s, want uploaded", r.Status)
	}

	// A failing hook rolls the move back.
	boom := errors.New("recorder full")
	if _, err := s.RequeueUploaded(ctx, "FR-3", []string{ids[1]}, func(context.Context, []tilestore.Requeued) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the hook's", err)
	}
	if r := readTile(t, s, ids[1]); r.Status != "uploaded" {
		t.Fatalf("after a failed hook: status %s, want uploaded", r.Status)
	}
}
