package tilestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PruneRequest says which cached blobs PruneBlobs frees.
type PruneRequest struct {
	FlightID string // "" = every flight
	// UploadedBefore, when not zero, keeps the blobs of tiles uploaded at
	// or after it (compared with uploaded_at, the database's time of the
	// settlement).
	UploadedBefore time.Time
	// DryRun measures what would be freed and changes nothing.
	DryRun bool
	// Chunk is how many tiles one transaction prunes (default 1,000): the
	// chunk's rows stay locked while its files are removed.
	Chunk int
}

// PruneResult is what PruneBlobs freed (or, in a dry run, would free).
type PruneResult struct {
	Tiles         int64 // tiles whose blob is now pruned
	Files         int64 // blob files removed
	DiskBytes     int64 // space the removed files took on disk (allocated blocks)
	RecordedBytes int64 // the pruned tiles' recorded sizes
	Missing       int64 // pruned tiles whose blob was already gone from the cache
	// KeptShared counts uploaded tiles whose blob path another tile that
	// still needs the bytes (not uploaded, or in an open batch) also
	// names: their blob is kept.
	KeptShared int64
	// DirsRemoved counts the cache directories left empty and removed
	// (of flights no import was writing into at the time).
	DirsRemoved int64
	Journal     JournalPrune
	flights     map[string]bool // flights with a pruned tile
}

// Prune frees what req names: the cached blobs of uploaded tiles
// (PruneBlobs), the directories that leaves empty, and the journal rows of
// finished flights (PruneJournal). A dry run measures and changes nothing.
func (s *Store) Prune(ctx context.Context, blobs *BlobStore, req PruneRequest) (PruneResult, error) {
	res, err := s.PruneBlobs(ctx, blobs, req)
	if err != nil {
		return res, err
	}
	if !req.DryRun {
		for id := range res.flights {
			// An import writing into the flight's directories holds its
			// lock shared: its directories are left for the next prune.
			l, err := blobs.LockFlight(id, true)
			if err != nil {
				continue
			}
			n, _ := blobs.RemoveEmptyDirs(id)
			l.Release()
			res.DirsRemoved += n
		}
	}
	if res.Journal, err = s.PruneJournal(ctx, req.FlightID, req.DryRun); err != nil {
		return res, err
	}
	return res, nil
}

// JournalPrune is what PruneJournal dropped from the upload journal.
type JournalPrune struct {
	Flights    []string // the finished flights whose journal was pruned
	Batches    int64    // settled batches, and failed ones whose members are all uploaded
	Rejections int64    // counted rejections of tiles now uploaded
	// RowBytes estimates the bytes the dropped rows held (their stored
	// size, batch member lists included): space Postgres reuses once
	// autovacuum has seen it, not space it returns to the filesystem.
	RowBytes int64
}

// pruneCandidatesSQL locks the next chunk of tiles whose blob may go: the
// provider holds them (uploaded), no open batch names them (open_op_id,
// the one column that says so: SettleBatch and FailBatch clear it in the
// transaction that ends the batch), and the cache still has the blob (not
// pruned since the tile was last uploaded: a pruned tile moved back to
// pending, restored by a re-import and uploaded again is pruned again). FOR
// UPDATE makes a concurrent change of a tile's status (a person moving it
// back to pending) wait for the chunk, and Postgres rechecks these
// conditions on the row's newest version before the chunk takes it.
const pruneCandidatesSQL = `
SELECT tile_id, blob_path, size_bytes, flight_id FROM tiles
 WHERE ($1 = '' OR flight_id = $1) AND voting_status = 'uploaded' AND open_op_id IS NULL
   AND (blob_pruned_at IS NULL OR blob_pruned_at < uploaded_at)
   AND ($2::timestamptz IS NULL OR uploaded_at < $2)
   AND tile_id > $3
 ORDER BY tile_id LIMIT $4
 FOR UPDATE`

// sharedPathsSQL lists the blob paths more than one tile names. tiles
// import names a tile's blob after its flight, zoom, x and y, as it names
// the tile, so two tiles share a path only through rows written some
// other way; the check reads the table once per prune, and only a chunk
// holding such a path pays a closer look under its locks.
const sharedPathsSQL = `SELECT blob_path FROM tiles WHERE ($1 = '' OR flight_id = $1 OR blob_path IN
	(SELECT blob_path FROM tiles WHERE flight_id = $1)) GROUP BY blob_path HAVING count(*) > 1`

// stillNeededSQL returns which of the paths $1 a tile outside the chunk
// ($2) still needs: one not uploaded, or in an open batch.
const stillNeededSQL = `SELECT DISTINCT blob_path FROM tiles
	WHERE blob_path = ANY($1) AND NOT tile_id = ANY($2)
	  AND (voting_status <> 'uploaded' OR open_op_id IS NOT NULL)`

// PruneBlobs removes from the cache the blobs of uploaded tiles (see
// PruneRequest) and records each as pruned (tiles.blob_pruned_at), a chunk
// per transaction: the chunk's rows are locked, its files removed, then
// the rows marked and committed. A crash between the removal and the
// commit leaves tiles whose blob is gone but not marked; the next prune
// finds them missing and marks them. A tile pending, given up, rejected
// by the vote or in an open batch is never a candidate, and a blob whose
// path such a tile also names is kept.
func (s *Store) PruneBlobs(ctx context.Context, blobs *BlobStore, req PruneRequest) (PruneResult, error) {
	res := PruneResult{flights: map[string]bool{}}
	if req.FlightID != "" {
		if err := ValidateFlightID(req.FlightID); err != nil {
			return res, err
		}
	}
	chunk := req.Chunk
	if chunk <= 0 {
		chunk = 1000
	}
	var before *time.Time
	if !req.UploadedBefore.IsZero() {
		before = &req.UploadedBefore
	}
	shared := map[string]bool{}
	rows, err := s.pool.Query(ctx, sharedPathsSQL, req.FlightID)
	if err != nil {
		return res, fmt.Errorf("prune blobs: find blob paths shared by tiles: %w", err)
	}
	var p string
	if _, err := pgx.ForEachRow(rows, []any{&p}, func() error { shared[p] = true; return nil }); err != nil {
		return res, fmt.Errorf("prune blobs: find blob paths shared by tiles: %w", err)
	}
	after := ""
	for {
		var n int
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			c, last, err := pruneChunk(ctx, tx, blobs, req, before, after, chunk, shared)
			n, after = c.n, last
			if err != nil {
				return err
			}
			res.add(c.PruneResult)
			for _, f := range c.flights {
				res.flights[f] = true
			}
			if req.DryRun {
				return errDryRun
			}
			return nil
		})
		if err != nil && !errors.Is(err, errDryRun) {
			return res, fmt.Errorf("prune blobs: %w", err)
		}
		if n < chunk {
			return res, nil
		}
	}
}

var errDryRun = errors.New("dry run: rolled back")

type chunkResult struct {
	PruneResult
	n       int      // candidates read
	flights []string // of the tiles pruned
}

func (r *PruneResult) add(c PruneResult) {
	r.Tiles += c.Tiles
	r.Files += c.Files
	r.DiskBytes += c.DiskBytes
	r.RecordedBytes += c.RecordedBytes
	r.Missing += c.Missing
	r.KeptShared += c.KeptShared
}

func pruneChunk(ctx context.Context, tx pgx.Tx, blobs *BlobStore, req PruneRequest, before *time.Time,
	after string, limit int, shared map[string]bool) (chunkResult, string, error) {
	var c chunkResult
	rows, err := tx.Query(ctx, pruneCandidatesSQL, req.FlightID, before, after, limit)
	if err != nil {
		return c, after, fmt.Errorf("lock uploaded tiles: %w", err)
	}
	type cand struct {
		id, path, flight string
		size             int64
	}
	var cs []cand
	var x cand
	if _, err := pgx.ForEachRow(rows, []any{&x.id, &x.path, &x.size, &x.flight}, func() error { cs = append(cs, x); return nil }); err != nil {
		return c, after, fmt.Errorf("lock uploaded tiles: %w", err)
	}
	c.n = len(cs)
	if len(cs) == 0 {
		return c, after, nil
	}
	last := cs[len(cs)-1].id
	ids := make([]string, len(cs))
	var sharedHere []string
	for i, t := range cs {
		ids[i] = t.id
		if shared[t.path] {
			sharedHere = append(sharedHere, t.path)
		}
	}
	needed := map[string]bool{}
	if len(sharedHere) > 0 {
		rows, err := tx.Query(ctx, stillNeededSQL, sharedHere, ids)
		if err != nil {
			return c, last, fmt.Errorf("check shared blob paths: %w", err)
		}
		var p string
		if _, err := pgx.ForEachRow(rows, []any{&p}, func() error { needed[p] = true; return nil }); err != nil {
			return c, last, fmt.Errorf("check shared blob paths: %w", err)
		}
	}
	removed := map[string]bool{} // a path two pruned tiles share is removed once
	var pruned []string
	for _, t := range cs {
		if needed[t.path] {
			c.KeptShared++
			continue
		}
		pruned = append(pruned, t.id)
		if len(c.flights) == 0 || c.flights[len(c.flights)-1] != t.flight {
			c.flights = append(c.flights, t.flight)
		}
		c.Tiles++
		c.RecordedBytes += t.size
		if removed[t.path] {
			continue
		}
		removed[t.path] = true
		disk, found, err := removeBlob(blobs, t.path, req.DryRun)
		if err != nil {
			return c, last, fmt.Errorf("tile %s: %w", t.id, err)
		}
		if !found {
			c.Missing++
			continue
		}
		c.Files++
		c.DiskBytes += disk
	}
	if req.DryRun || len(pruned) == 0 {
		return c, last, nil
	}
	// The mark is never earlier than the upload it follows: a settlement
	// whose transaction began after this one's (and so has a later now())
	// may have committed before the candidates were read, and a mark
	// earlier than its uploaded_at would read as "uploaded again since".
	if _, err := tx.Exec(ctx, `UPDATE tiles SET blob_pruned_at = greatest(now(), uploaded_at)
		WHERE tile_id = ANY($1)`, pruned); err != nil {
		return c, last, fmt.Errorf("mark %d tiles' blobs pruned: %w", len(pruned), err)
	}
	return c, last, nil
}

// removeBlob removes the blob at rel (unless dryRun) and returns the space
// it took on disk; found is false when there was no such file.
func removeBlob(blobs *BlobStore, rel string, dryRun bool) (disk int64, found bool, err error) {
	local, err := blobs.localPath(rel)
	if err != nil {
		return 0, false, err
	}
	st, err := blobs.dir.Lstat(local)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("look at blob %s: %w", rel, err)
	}
	disk = allocated(st)
	if dryRun {
		return disk, true, nil
	}
	if err := blobs.dir.Remove(local); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, false, fmt.Errorf("remove blob %s: %w", rel, err)
	}
	return disk, true, nil
}

// allocated is the space a file takes on disk: its blocks, which for a
// small tile is a whole filesystem block, not its size.
func allocated(st os.FileInfo) int64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512
	}
	return st.Size()
}

// PrunedBlobs returns, of the tiles ids, those whose cached blob a prune
// removed, with when.
func (s *Store) PrunedBlobs(ctx context.Context, ids []string) (map[string]time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT tile_id, blob_pruned_at FROM tiles
		WHERE tile_id = ANY($1) AND blob_pruned_at IS NOT NULL`, ids)
	if err != nil {
		return nil, fmt.Errorf("look up pruned blobs: %w", err)
	}
	out := map[string]time.Time{}
	var id string
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error { out[id] = at; return nil }); err != nil {
		return nil, fmt.Errorf("look up pruned blobs: %w", err)
	}
	return out, nil
}

// PrunedUploaded counts the uploaded tiles of a flight ("" for every one)
// whose cached blob a prune removed.
func (s *Store) PrunedUploaded(ctx context.Context, flightID string) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tiles WHERE ($1 = '' OR flight_id = $1)
		AND voting_status = 'uploaded' AND blob_pruned_at IS NOT NULL`, flightID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count pruned blobs: %w", err)
	}
	return n, nil
}
