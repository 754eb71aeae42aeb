package tilestore

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// tileColumns is the column list every tile-reading query selects, in the
// order scanTile reads them.
const tileColumns = `tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path,
	captured_at, voting_status, upload_attempts, uploaded_at, created_at`

func scanTile(row pgx.Row) (Tile, error) {
	var t Tile
	var z int16
	var status string
	err := row.Scan(&t.ID, &t.FlightID, &z, &t.X, &t.Y, &t.ContentType, &t.SizeBytes, &t.SHA256,
		&t.BlobPath, &t.CapturedAt, &status, &t.UploadAttempts, &t.UploadedAt, &t.CreatedAt)
	t.Z = int(z)
	t.VotingStatus = VotingStatus(status)
	return t, err
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidateTile checks a tile's fields against what the schema will accept,
// so an import fails with a message naming the tile and the field rather
// than a constraint name.
func ValidateTile(t Tile) error {
	if err := ValidateTileID(t.ID); err != nil {
		return err
	}
	if err := ValidateFlightID(t.FlightID); err != nil {
		return fmt.Errorf("tile %s: %w", t.ID, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("tile %s: %s", t.ID, fmt.Sprintf(format, a...))
	}
	switch {
	case t.Z < 0 || t.Z > 24:
		return bad("zoom %d is outside 0-24", t.Z)
	case t.X < 0 || t.Y < 0 || t.X >= int64(1)<<t.Z || t.Y >= int64(1)<<t.Z:
		return bad("x=%d y=%d is outside the %dx%d grid of zoom %d", t.X, t.Y, int64(1)<<t.Z, int64(1)<<t.Z, t.Z)
	case t.ContentType == "":
		return bad("content type is empty")
	case t.SizeBytes < 0:
		return bad("size %d is negative", t.SizeBytes)
	case !sha256Hex.MatchString(t.SHA256):
		return bad("sha256 %q is not 64 lowercase hex characters", clip(t.SHA256))
	case t.CapturedAt.IsZero():
		return bad("captured_at is not set")
	case t.VotingStatus != "" && !t.VotingStatus.Valid():
		return bad("voting status %q is not one of pending, trusted, rejected, uploaded, upload_giveup", t.VotingStatus)
	}
	if err := validateBlobPath(t.BlobPath); err != nil {
		return bad("%v", err)
	}
	return nil
}

func validateBlobPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("blob path is empty")
	case strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("blob path %q has a backslash or NUL", clip(p))
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("blob path %q is absolute: it must be relative to the cache root", clip(p))
	case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("blob path %q is not a clean path inside the cache root", clip(p))
	}
	return nil
}

// InsertTiles adds tiles, ignoring any whose tile_id already exists, and
// returns how many were new. Every tile is validated first; one bad tile
// stops the whole import before anything is written. The flights must exist.
//
// The rows go through COPY into a temporary table and then one
// INSERT ... SELECT ... ON CONFLICT DO NOTHING: COPY is the fast path into
// Postgres, but it cannot skip conflicts by itself.
func (s *Store) InsertTiles(ctx context.Context, tiles []Tile) (int, error) {
	if len(tiles) == 0 {
		return 0, nil
	}
	for _, t := range tiles {
		if err := ValidateTile(t); err != nil {
			return 0, fmt.Errorf("insert tiles: %w", err)
		}
	}
	var inserted int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// tile_id in the tiles column's byte order (migration 0013), so the
		// rows are written in the order claims take them, whatever the
		// database's default collation.
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE tiles_import (
			tile_id TEXT COLLATE "C", flight_id TEXT, z SMALLINT, x BIGINT, y BIGINT, content_type TEXT,
			size_bytes BIGINT, sha256 TEXT, blob_path TEXT, captured_at TIMESTAMPTZ, voting_status TEXT
		) ON COMMIT DROP`); err != nil {
			return fmt.Errorf("create import table: %w", err)
		}
		cols := []string{"tile_id", "flight_id", "z", "x", "y", "content_type", "size_bytes",
			"sha256", "blob_path", "captured_at", "voting_status"}
		src := pgx.CopyFromSlice(len(tiles), func(i int) ([]any, error) {
			t := tiles[i]
			st := t.VotingStatus
			if st == "" {
				st = StatusPending
			}
			return []any{t.ID, t.FlightID, int16(t.Z), t.X, t.Y, t.ContentType, t.SizeBytes,
				t.SHA256, t.BlobPath, t.CapturedAt, string(st)}, nil
		})
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"tiles_import"}, cols, src); err != nil {
			return fmt.Errorf("copy: %w", err)
		}
		var missing []string
		if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT i.flight_id), '{}') FROM tiles_import i
			WHERE NOT EXISTS (SELECT 1 FROM flights f WHERE f.flight_id = i.flight_id)`).Scan(&missing); err != nil {
			return fmt.Errorf("check flights: %w", err)
		}
		if len(missing) > 0 {
			return fmt.Errorf("flight %s: %w (create it first)", strings.Join(missing, ", "), ErrFlightNotFound)
		}
		// DISTINCT ON makes a tile listed twice in one import insert once
		// (which copy wins is unspecified); sorting by tile_id also keeps
		// the primary key's index inserts local.
		tag, err := tx.Exec(ctx, `
INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at, voting_status)
SELECT DISTINCT ON (tile_id) tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at, voting_status
  FROM tiles_import ORDER BY tile_id
ON CONFLICT (tile_id) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		inserted = int(tag.RowsAffected())
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("insert %d tiles: %w", len(tiles), err)
	}
	return inserted, nil
}

// TilesByID returns the tiles among ids that exist, in tile_id order;
// unknown IDs are left out (callers that need them all compare lengths).
func (s *Store) TilesByID(ctx context.Context, ids []string) ([]Tile, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+tileColumns+` FROM tiles WHERE tile_id = ANY($1) ORDER BY tile_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("read %d tiles by id: %w", len(ids), err)
	}
	tiles, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tile, error) { return scanTile(r) })
	if err != nil {
		return nil, fmt.Errorf("read %d tiles by id: %w", len(ids), err)
	}
	return tiles, nil
}
