package tiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// existingTiles returns each of ids already recorded.
func existingTiles(ctx context.Context, store *tilestore.Store, ids []string) (map[string]tilestore.Tile, error) {
	tiles, err := store.TilesByID(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]tilestore.Tile, len(tiles))
	for _, t := range tiles {
		out[t.ID] = t
	}
	return out, nil
}

// Mismatch is a file whose bytes differ from the tile already recorded
// under its ID: the record and its blob are kept.
type Mismatch struct {
	Path           string `json:"path"`
	TileID         string `json:"tile_id"`
	RecordedSHA256 string `json:"recorded_sha256"`
	FileSHA256     string `json:"file_sha256"`
}

func (m Mismatch) Error() string {
	return fmt.Sprintf("%q: tile %s is recorded with sha256 %s but this file's sha256 is %s; "+
		"the recorded tile and its blob were kept", m.Path, m.TileID, m.RecordedSHA256, m.FileSHA256)
}

// repairBlob restores the cached blob of a recorded tile from the file
// being imported, when the blob is missing or damaged and the file has the
// recorded sha256. It reports whether it wrote the blob. The file is read
// whole and checked before anything is written (tiles are small), and the
// blob is replaced atomically with mode 0600, as an import writes it.
func repairBlob(blobs *tilestore.BlobStore, rec tilestore.Tile, path string) (bool, error) {
	if rec.VotingStatus == tilestore.StatusUploaded {
		return false, nil // the provider holds it; the blob is not needed again
	}
	lf, err := uploader.CheckBlob(blobs, rec, uploader.CheckSHA256)
	if err != nil || lf == nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false, fmt.Errorf("repair the blob of tile %s from %q: %w", rec.ID, path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, rec.SizeBytes+1))
	if err != nil {
		return false, fmt.Errorf("repair the blob of tile %s from %q: %w", rec.ID, path, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != rec.SHA256 {
		return false, fmt.Errorf("import %q: the file changed while it was being imported; run the import again", path)
	}
	if _, _, err := blobs.Put(rec.BlobPath, bytes.NewReader(b)); err != nil {
		return false, fmt.Errorf("repair the blob of tile %s (%s): %w", rec.ID, lf.Problem, err)
	}
	return true, nil
}
