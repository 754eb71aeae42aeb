package tiles

import (
	"context"

	"github.com/tilectl/tilectl/tilestore"
)

// existingTiles returns the sha256 of each of ids already recorded.
func existingTiles(ctx context.Context, store *tilestore.Store, ids []string) (map[string]string, error) {
	tiles, err := store.TilesByID(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(tiles))
	for _, t := range tiles {
		out[t.ID] = t.SHA256
	}
	return out, nil
}
