package tilestore

import "context"

// TileMetadataStore is the tile-status part of the store that the upload
// path relies on (contract C6). Implementations must make each method one
// atomic statement, so concurrent callers never lose an update, and must
// return an error matching ErrTileNotFound, changing nothing, when an ID
// names no tile.
type TileMetadataStore interface {
	// PendingUploads pages a flight's pending and trusted tiles in tile_id
	// order, starting after afterTileID ("" for the first page).
	PendingUploads(ctx context.Context, flightID, afterTileID string, limit int) ([]Tile, error)
	// MarkUploaded marks tiles uploaded; it returns how many changed.
	MarkUploaded(ctx context.Context, ids []string) (int, error)
	// UpdateVotingStatus records a vote; it returns how many changed.
	UpdateVotingStatus(ctx context.Context, ids []string, st VotingStatus) (int, error)
	// IncrementUploadAttempts adds one attempt and returns the new count.
	IncrementUploadAttempts(ctx context.Context, id string) (int, error)
	// IncrementUploadAttemptsMany adds one attempt per occurrence of each ID
	// and returns each tile's new count.
	IncrementUploadAttemptsMany(ctx context.Context, ids []string) (map[string]int, error)
}

var _ TileMetadataStore = (*Store)(nil)
