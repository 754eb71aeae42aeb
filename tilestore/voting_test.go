package tilestore_test

import (
	"errors"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func TestMarkUploadedMarksOnceAndRefusesUnknownTiles(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	ids := seedFlight(t, s, "F1", 4)

	n, err := s.MarkUploaded(ctx, []string{ids[0], ids[1], ids[1]})
	if err != nil || n != 2 {
		t.Fatalf("MarkUploaded = %d, %v; want 2", n, err)
	}
	first := readTile(t, s, ids[0])
	if first.Status != "uploaded" || first.UploadedAt == nil {
		t.Fatalf("tile = %+v, want uploaded with uploaded_at", first)
	}
	n, err = s.MarkUploaded(ctx, []string{ids[0], ids[2]})
	if err != nil || n != 1 {
		t.Fatalf("second MarkUploaded = %d, %v; want 1 (only the new one)", n, err)
	}
	if again := readTile(t, s, ids[0]); !again.UploadedAt.Equal(*first.UploadedAt) {
		t.Errorf("uploaded_at moved from %v to %v", first.UploadedAt, again.UploadedAt)
	}

	_, err = s.MarkUploaded(ctx, []string{ids[3], "ghost"})
	if !errors.Is(err, tilestore.ErrTileNotFound) {
		t.Fatalf("err = %v, want ErrTileNotFound", err)
	}
	if st := readTile(t, s, ids[3]).Status; st != "pending" {
		t.Errorf("tile 3 is %s after a refused call, want pending", st)
	}
}
