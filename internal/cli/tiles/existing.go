package tiles

import (
	"context"
	"fmt"

	"github.com/tilectl/tilectl/tilestore"
)

// existingTiles returns the sha256 of each of ids already recorded.
//
// This read belongs in tilestore (as a Store method) and should move there;
// it is here because the store did not offer it when import was written.
// It only reads.
func existingTiles(ctx context.Context, store *tilestore.Store, ids []string) (map[string]string, error) {
	rows, err := store.Pool().Query(ctx, `SELECT tile_id, sha256 FROM tiles WHERE tile_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("look up %d tiles: %w", len(ids), err)
	}
	defer rows.Close()
	out := make(map[string]string)
	for rows.Next() {
		var id, sha string
		if err := rows.Scan(&id, &sha); err != nil {
			return nil, fmt.Errorf("look up tiles: %w", err)
		}
		out[id] = sha
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up tiles: %w", err)
	}
	return out, nil
}
