package tilestore_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/tilestore"
)

func TestPendingUploadsPagesUploadableTilesInIDOrder(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 10)
	seedFlight(t, s, "F2", 3) // another flight's tiles never show up
	setStatusSQL(t, s, "trusted", ids[1])
	setStatusSQL(t, s, "uploaded", ids[2])
	setStatusSQL(t, s, "rejected", ids[4])
	setStatusSQL(t, s, "upload_giveup", ids[7])
	want := []string{ids[0], ids[1], ids[3], ids[5], ids[6], ids[8], ids[9]}

	var got []string
	after := ""
	pages := 0
	for {
		page, err := s.PendingUploads(ctx, "F1", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		pages++
		if len(page) > 3 {
			t.Fatalf("page of %d tiles, limit 3", len(page))
		}
		for _, p := range page {
			got = append(got, p.ID)
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged IDs = %v\nwant %v", got, want)
	}
	if pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}

	tiles, bytes, err := s.PendingSummary(ctx, "F1")
	if err != nil {
		t.Fatal(err)
	}
	var wantBytes int64
	for _, i := range []int{0, 1, 3, 5, 6, 8, 9} {
		wantBytes += tile("F1", i).SizeBytes
	}
	if tiles != len(want) || bytes != wantBytes {
		t.Errorf("summary = %d tiles, %d bytes; want %d, %d", tiles, bytes, len(want), wantBytes)
	}
	if _, err := s.PendingUploads(ctx, "F1", "", 0); err == nil {
		t.Error("limit 0 accepted")
	}
}

// The statuses in PendingUploads' WHERE clause must match the partial
// index's predicate, or every page is a scan of the flight.
func TestPendingUploadsUsesThePartialIndex(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	seedFlight(t, s, "F1", 20)
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL enable_bitmapscan = off"); err != nil {
			return err
		}
		plan, err := explain(ctx, tx, tilestore.PendingUploadsSQL, "F1", "", 100)
		if err != nil {
			return err
		}
		if !strings.Contains(plan, "tiles_pending_idx") {
			t.Errorf("plan does not use tiles_pending_idx:\n%s", plan)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
