package tilestore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

func TestInsertTilesCountsOnlyNewTilesAndReinsertIsANoOp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	seedFlight(t, s, "F1", 0)
	batch := []tilestore.Tile{tile("F1", 0), tile("F1", 1), tile("F1", 2)}
	n, err := s.InsertTiles(ctx, batch)
	if err != nil || n != 3 {
		t.Fatalf("first insert = %d, %v; want 3", n, err)
	}
	// Change a field: a re-import must not overwrite what is stored.
	again := append([]tilestore.Tile(nil), batch...)
	again[0].ContentType = "image/jpeg"
	n, err = s.InsertTiles(ctx, again)
	if err != nil || n != 0 {
		t.Fatalf("re-insert = %d, %v; want 0", n, err)
	}
	n, err = s.InsertTiles(ctx, []tilestore.Tile{tile("F1", 2), tile("F1", 3), tile("F1", 3)})
	if err != nil || n != 1 {
		t.Fatalf("overlapping insert with a duplicate = %d, %v; want 1", n, err)
	}
	got, err := s.PendingUploads(ctx, "F1", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("stored %d tiles, want 4", len(got))
	}
	want := tile("F1", 0)
	g := got[0]
	if g.ContentType != "image/png" || g.SHA256 != want.SHA256 || g.Z != want.Z || g.X != want.X ||
		g.BlobPath != want.BlobPath || !g.CapturedAt.Equal(want.CapturedAt) || g.VotingStatus != tilestore.StatusPending {
		t.Errorf("stored tile = %+v, want fields of %+v", g, want)
	}
}

func TestInsertTilesRefusesInvalidTilesBeforeWritingAny(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	seedFlight(t, s, "F1", 0)
	cases := []struct {
		name   string
		mutate func(*tilestore.Tile)
		want   string
	}{
		{"zoom too deep", func(x *tilestore.Tile) { x.Z = 25 }, "zoom 25"},
		{"x off the grid", func(x *tilestore.Tile) { x.Z = 1; x.X = 2; x.Y = 0 }, "outside"},
		{"upper-case sha", func(x *tilestore.Tile) { x.SHA256 = strings.ToUpper(x.SHA256) }, "sha256"},
		{"negative size", func(x *tilestore.Tile) { x.SizeBytes = -1 }, "negative"},
		{"no content type", func(x *tilestore.Tile) { x.ContentType = "" }, "content type"},
		{"blob path climbs out", func(x *tilestore.Tile) { x.BlobPath = "../../etc/passwd" }, "blob path"},
		{"absolute blob path", func(x *tilestore.Tile) { x.BlobPath = "/etc/passwd" }, "absolute"},
		{"quote in tile ID", func(x *tilestore.Tile) { x.ID = "t'1" }, "invalid ID"},
		{"unknown status", func(x *tilestore.Tile) { x.VotingStatus = "lost" }, "voting status"},
		{"no capture time", func(x *tilestore.Tile) { x.CapturedAt = time.Time{} }, "captured_at"},
	}
	for _, tc := range cases {
		good := tile("F1", 1)
		bad := tile("F1", 2)
		tc.mutate(&bad)
		n, err := s.InsertTiles(ctx, []tilestore.Tile{good, bad})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.want)
		}
		if n != 0 {
			t.Errorf("%s: inserted %d", tc.name, n)
		}
	}
	if tiles, _, err := s.PendingSummary(ctx, "F1"); err != nil || tiles != 0 {
		t.Errorf("after refused imports: %d tiles stored (%v), want 0", tiles, err)
	}
}

func TestInsertTilesOfUnknownFlightIsFlightNotFound(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	seedFlight(t, s, "F1", 0)
	n, err := s.InsertTiles(ctx, []tilestore.Tile{tile("F1", 0), tile("F9", 0)})
	if !errors.Is(err, tilestore.ErrFlightNotFound) || !strings.Contains(err.Error(), "F9") {
		t.Fatalf("err = %v, want ErrFlightNotFound naming F9", err)
	}
	if n != 0 {
		t.Errorf("inserted %d", n)
	}
	if tiles, _, _ := s.PendingSummary(ctx, "F1"); tiles != 0 {
		t.Errorf("%d tiles of F1 were written despite the error", tiles)
	}
}

func TestTilesByIDReturnsKnownTilesWhateverTheirStatusAndSkipsUnknown(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	seedFlight(t, s, "F1", 0)
	if _, err := s.InsertTiles(ctx, []tilestore.Tile{tile("F1", 0), tile("F1", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkUploaded(ctx, []string{tile("F1", 1).ID}); err != nil {
		t.Fatal(err)
	}
	got, err := s.TilesByID(ctx, []string{tile("F1", 1).ID, "F1-no-such-tile", tile("F1", 0).ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != tile("F1", 0).ID || got[1].ID != tile("F1", 1).ID {
		t.Fatalf("TilesByID = %+v, want tiles 0 and 1 in id order", got)
	}
	if got[1].VotingStatus != tilestore.StatusUploaded || got[0].SHA256 != tile("F1", 0).SHA256 {
		t.Errorf("fields not read back: %+v", got)
	}
}
