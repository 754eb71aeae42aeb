package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tilectl/tilectl/provider/optable"
)

const providerSchema = `
CREATE TABLE IF NOT EXISTS provider_tiles (
    flight_id   TEXT        NOT NULL,
    tile_id     TEXT        NOT NULL,
    sha256      TEXT        NOT NULL,
    size        BIGINT      NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    path        TEXT        NOT NULL,
    PRIMARY KEY (flight_id, tile_id)
);
-- One row per time a tile's bytes were stored: exactly-once means one row.
CREATE TABLE IF NOT EXISTS provider_tile_writes (
    id         BIGSERIAL   PRIMARY KEY,
    flight_id  TEXT        NOT NULL,
    tile_id    TEXT        NOT NULL,
    op_id      TEXT        NOT NULL,
    sha256     TEXT        NOT NULL,
    written_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS provider_tile_writes_tile_idx ON provider_tile_writes (flight_id, tile_id);
-- Rejections answered, per operation and tile.
CREATE TABLE IF NOT EXISTS provider_rejections (
    op_id   TEXT    NOT NULL,
    tile_id TEXT    NOT NULL,
    reason  TEXT    NOT NULL,
    n       INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (op_id, tile_id, reason)
);
-- Every fingerprint a key arrived with: a correct client has one per key.
CREATE TABLE IF NOT EXISTS provider_op_fingerprints (
    scope       TEXT        NOT NULL,
    op_id       TEXT        NOT NULL,
    fingerprint TEXT        NOT NULL,
    requests    INTEGER     NOT NULL DEFAULT 1,
    first_seen  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, op_id, fingerprint)
);`

// EnsureSchema creates the operation table's schema and the provider's own
// tables if they are missing. It is safe to call on every start.
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if err := optable.EnsureSchema(ctx, pool); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('tileprovider/schema'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, providerSchema)
		return err
	})
	if err != nil {
		return fmt.Errorf("ensure provider schema: %w", err)
	}
	return nil
}

// tileStore keeps tile bytes on disk and their records in Postgres.
type tileStore struct {
	pool    *pgxpool.Pool
	dir     string
	noFsync bool
}

type heldTile struct {
	SHA256     string    `json:"sha256"`
	Size       int64     `json:"size"`
	ReceivedAt time.Time `json:"received_at"`
}

var errTileNotHeld = errors.New("tile not held")

func (s *tileStore) get(ctx context.Context, flightID, tileID string) (heldTile, error) {
	var h heldTile
	err := s.pool.QueryRow(ctx, `SELECT sha256, size, received_at FROM provider_tiles WHERE flight_id = $1 AND tile_id = $2`,
		flightID, tileID).Scan(&h.SHA256, &h.Size, &h.ReceivedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, errTileNotHeld
	}
	if err != nil {
		return h, fmt.Errorf("look up tile %s/%s: %w", flightID, tileID, err)
	}
	return h, nil
}

// put stores a verified tile its caller found not held with these bytes
// (get). The file is written (atomically, to a name of its own) before the
// row that makes it visible, and the row insert decides between two racing
// writers: the one that loses answers duplicate, so a tile is recorded as
// written once.
func (s *tileStore) put(ctx context.Context, opID, flightID, tileID, sum string, data []byte, now time.Time) (status string, err error) {
	rel := filepath.Join(safeName(flightID), safeName(tileID)+"."+sum[:16])
	if err := writeAtomic(filepath.Join(s.dir, rel), data, !s.noFsync); err != nil {
		return "", fmt.Errorf("write tile %s/%s: %w", flightID, tileID, err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if s.noFsync {
			// Benchmark mode: no durability for tile records either, so a
			// per-tile WAL flush does not make this provider the bottleneck
			// a client is measured against.
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, `INSERT INTO provider_tiles (flight_id, tile_id, sha256, size, received_at, path)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (flight_id, tile_id) DO UPDATE SET sha256 = EXCLUDED.sha256, size = EXCLUDED.size,
			    received_at = EXCLUDED.received_at, path = EXCLUDED.path
			WHERE provider_tiles.sha256 <> EXCLUDED.sha256`,
			flightID, tileID, sum, int64(len(data)), now, rel)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			status = "duplicate" // a concurrent batch stored the same bytes first
			return nil
		}
		status = "accepted"
		_, err = tx.Exec(ctx, `INSERT INTO provider_tile_writes (flight_id, tile_id, op_id, sha256) VALUES ($1, $2, $3, $4)`,
			flightID, tileID, opID, sum)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("record tile %s/%s: %w", flightID, tileID, err)
	}
	return status, nil
}

// wrote reports whether opID's write of the tile with sum is recorded:
// its put committed, whatever its answer said.
func (s *tileStore) wrote(ctx context.Context, opID, flightID, tileID, sum string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM provider_tile_writes
		WHERE flight_id = $1 AND tile_id = $2 AND op_id = $3 AND sha256 = $4)`, flightID, tileID, opID, sum).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up the write of tile %s/%s by %s: %w", flightID, tileID, opID, err)
	}
	return ok, nil
}

func (s *tileStore) noteRejections(ctx context.Context, opID string, ids, reasons []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO provider_rejections (op_id, tile_id, reason)
		SELECT $1, u.id, u.reason FROM unnest($2::text[], $3::text[]) AS u(id, reason)
		ON CONFLICT (op_id, tile_id, reason) DO UPDATE SET n = provider_rejections.n + 1`, opID, ids, reasons)
	if err != nil {
		return fmt.Errorf("record %d rejection(s) of %s: %w", len(ids), opID, err)
	}
	return nil
}

func (s *tileStore) noteFingerprint(ctx context.Context, scope, opID, fp string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO provider_op_fingerprints (scope, op_id, fingerprint) VALUES ($1, $2, $3)
		ON CONFLICT (scope, op_id, fingerprint) DO UPDATE SET requests = provider_op_fingerprints.requests + 1`, scope, opID, fp)
	return err
}

// safeName keeps IDs from naming paths outside the storage dir.
func safeName(s string) string {
	out := []byte(s)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			out[i] = '_'
		}
	}
	if len(out) == 0 {
		return "_"
	}
	return string(out)
}

func writeAtomic(path string, data []byte, fsync bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path + ".tmp-" + hex.EncodeToString(rnd[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := syncIf(f, fsync); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func syncIf(f *os.File, fsync bool) error {
	if !fsync {
		return nil
	}
	return f.Sync()
}
