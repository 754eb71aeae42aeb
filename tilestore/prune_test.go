package tilestore_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

// TestPruneTakesOnlyUploadedTilesOutsideOpenBatchesAndKeepsSharedBlobs
// puts one tile in each state a prune must tell apart, with its blob on
// disk, and checks which blobs go.
func TestPruneTakesOnlyUploadedTilesOutsideOpenBatchesAndKeepsSharedBlobs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := newStore(t)
	ids, tiles, blobs := seedCachedFlight(t, s, "P1", 8)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// 0, 1: uploaded (pruned). 2: uploaded, but an open batch still names
	// it. 3: pending. 4: given up. 5: rejected by the vote. 6: uploaded,
	// sharing its blob path with 7, which is pending: kept.
	exec(`UPDATE tiles SET voting_status = 'uploaded', uploaded_at = now() WHERE tile_id = ANY($1)`,
		[]string{ids[0], ids[1], ids[2], ids[6]})
	exec(`INSERT INTO upload_batches (op_id, flight_id, fingerprint, tile_ids, sha256s) VALUES ('op-open', 'P1', 'f', $1, $2)`,
		[]string{ids[2]}, []string{tiles[2].SHA256})
	exec(`UPDATE tiles SET open_op_id = 'op-open' WHERE tile_id = $1`, ids[2])
	exec(`UPDATE tiles SET voting_status = 'upload_giveup', gave_up_at = now() WHERE tile_id = $1`, ids[4])
	exec(`UPDATE tiles SET voting_status = 'rejected' WHERE tile_id = $1`, ids[5])
	exec(`UPDATE tiles SET blob_path = $2 WHERE tile_id = $1`, ids[7], tiles[6].BlobPath)

	dry, err := s.Prune(ctx, blobs, tilestore.PruneRequest{FlightID: "P1", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Prune(ctx, blobs, tilestore.PruneRequest{FlightID: "P1", Chunk: 2})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Tiles != 2 || res.Tiles != 2 || res.Files != 2 || res.KeptShared != 1 || res.Missing != 0 {
		t.Fatalf("dry run %+v, prune %+v: want 2 tiles, 2 files, 1 kept shared", dry, res)
	}
	for i, tl := range tiles {
		_, err := os.Stat(filepath.Join(blobs.Root(), filepath.FromSlash(tl.BlobPath)))
		if gone, want := err != nil, i <= 1; gone != want {
			t.Errorf("tile %d (%s): blob gone %v, want %v", i, tl.ID, gone, want)
		}
	}
	// The flight is not finished (pending tiles, an open batch): its
	// journal stays.
	if len(res.Journal.Flights) != 0 || res.Journal.Batches != 0 {
		t.Fatalf("journal pruned of an unfinished flight: %+v", res.Journal)
	}
	pruned, err := s.PrunedBlobs(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(pruned) != 2 || pruned[ids[0]].IsZero() || pruned[ids[1]].IsZero() {
		t.Fatalf("marked pruned: %v", pruned)
	}
	// Uploaded again after a requeue and a re-import: pruned again.
	exec(`UPDATE tiles SET uploaded_at = now() + interval '1 second' WHERE tile_id = $1`, ids[0])
	if _, _, err := blobs.Put(tiles[0].BlobPath, strings.NewReader("again")); err != nil {
		t.Fatal(err)
	}
	if again, err := s.Prune(ctx, blobs, tilestore.PruneRequest{FlightID: "P1"}); err != nil || again.Tiles != 1 || again.Files != 1 {
		t.Fatalf("prune of a tile uploaded again: %+v, %v", again, err)
	}
}

// TestATilePrunedOnceIsNotPrunedAgain settles a tile with a settlement
// time later than the prune's own transaction time (a settlement whose
// transaction began after the prune's, committed before the prune read
// the tile) and prunes twice: the second prune finds nothing, so no prune
// reports a tile twice or a blob as missing that it removed itself.
func TestATilePrunedOnceIsNotPrunedAgain(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := newStore(t)
	ids, _, blobs := seedCachedFlight(t, s, "P2", 1)
	if _, err := s.Pool().Exec(ctx, `UPDATE tiles SET voting_status = 'uploaded',
		uploaded_at = now() + interval '1 second' WHERE tile_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	first, err := s.Prune(ctx, blobs, tilestore.PruneRequest{FlightID: "P2"})
	if err != nil || first.Tiles != 1 || first.Files != 1 {
		t.Fatalf("first prune: %+v, %v: want 1 tile, 1 file", first, err)
	}
	second, err := s.Prune(ctx, blobs, tilestore.PruneRequest{FlightID: "P2"})
	if err != nil || second.Tiles != 0 || second.Missing != 0 {
		t.Fatalf("second prune: %+v, %v: want nothing pruned", second, err)
	}
}

// seedCachedFlight adds a flight of n pending tiles with their blobs in a
// cache of their own, and returns the tiles' IDs, the tiles and the cache.
func seedCachedFlight(t *testing.T, s *tilestore.Store, flight string, n int) ([]string, []tilestore.Tile, *tilestore.BlobStore) {
	t.Helper()
	ids := seedFlight(t, s, flight, n)
	blobs, err := tilestore.NewBlobStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tiles, err := s.TilesByID(testCtx(t), ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tiles {
		if _, _, err := blobs.Put(tl.BlobPath, strings.NewReader(tl.ID)); err != nil {
			t.Fatal(err)
		}
	}
	return ids, tiles, blobs
}
