package tiles

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tilectl/tilectl/tilestore"
)

// importer imports the valid files of a directory a chunk at a time: it
// holds a chunk of paths and the previous chunk's rows, so its memory does
// not grow with the directory. For each chunk it reads every file once
// (hashing it and writing it into the cache on the way), makes the chunk's
// new blobs durable with one Sync, and only then records them with one
// InsertTiles: a recorded tile's blob is durable, and a crash or a cancel
// can lose only blobs no row points at. Chunks are recorded one after the
// other, each while the next one's files are read. Call finish at the end,
// whatever happened.
type importer struct {
	opts    *ImportOptions
	store   *tilestore.Store
	blobs   *tilestore.BlobStore
	sum     *ImportSummary
	size    int
	skip    map[string]bool // files the first pass found invalid
	readers []*tileReader   // one per worker
	chunk   []candidate
	// recording is the previous chunk's Sync and insert while they run
	// (nil when none does): the next chunk's files are read meanwhile.
	recording chan recording
}

func newImporter(opts *ImportOptions, store *tilestore.Store, blobs *tilestore.BlobStore, sum *ImportSummary) *importer {
	size := opts.BatchSize
	if size <= 0 {
		size = DefaultBatchSize
	}
	im := &importer{opts: opts, store: store, blobs: blobs, sum: sum, size: size,
		skip: map[string]bool{}, chunk: make([]candidate, 0, size), readers: newTileReaders()}
	return im
}

// finish imports the last chunk and waits for the recording under way;
// err is how the walk ended.
func (im *importer) finish(ctx context.Context, err error) error {
	if err == nil {
		err = im.flush(ctx)
	}
	if werr := im.wait(); err == nil {
		err = werr
	}
	return err
}

// add takes the next file of the walk, importing the chunk when it is full.
func (im *importer) add(ctx context.Context, c candidate) error {
	if im.skip[c.Path] {
		return nil
	}
	im.chunk = append(im.chunk, c)
	if len(im.chunk) < im.size {
		return nil
	}
	return im.flush(ctx)
}

// outcome is what importing one file of a chunk did.
type outcome struct {
	row      *tilestore.Tile // a new tile to record
	mismatch *Mismatch       // the file differs from the tile recorded under its ID
	repaired bool            // the recorded tile's blob was restored from the file
}

// flush imports the chunk: a tile already recorded keeps its record, and
// its blob is restored only from a file with the recorded sha256 (so the
// blob never disagrees with the record); a file with other bytes is a
// Mismatch.
func (im *importer) flush(ctx context.Context) error {
	chunk := im.chunk
	if len(chunk) == 0 {
		return nil
	}
	defer func() { im.chunk = im.chunk[:0] }()
	ids := make([]string, len(chunk))
	for i, c := range chunk {
		ids[i] = tileID(im.opts.FlightID, c)
	}
	existing, err := existingTiles(ctx, im.store, ids)
	if err != nil {
		return err
	}
	dirs, err := im.openDirs(chunk, ids, existing)
	defer func() {
		for _, d := range dirs {
			d.Close()
		}
	}()
	if err != nil {
		return err
	}
	out := make([]outcome, len(chunk))
	err = forEach(ctx, len(chunk), im.readers, func(r *tileReader, i int) error {
		var err error
		if rec, ok := existing[ids[i]]; ok {
			out[i], err = im.recorded(r, rec, chunk[i])
		} else {
			out[i], err = im.copyNew(r, dirs[dirKey(chunk[i])], ids[i], chunk[i])
		}
		return err
	})
	if err != nil {
		// The chunk is not recorded: the new blobs its files left are
		// removed (a full disk gets their space back); the next import
		// writes them again.
		var orphans []string
		for _, o := range out {
			if o.row != nil {
				orphans = append(orphans, o.row.BlobPath)
			}
		}
		_, _ = im.blobs.RemoveBlobs(orphans)
		return err
	}
	var rows []tilestore.Tile
	present := 0
	for i, o := range out {
		switch {
		case o.row != nil:
			rows = append(rows, *o.row)
			continue
		case o.mismatch != nil:
			im.sum.Mismatched = append(im.sum.Mismatched, *o.mismatch)
		case o.repaired:
			im.sum.Repaired++
			fmt.Fprintf(im.opts.IO.ErrOut, "repaired: tile %s: restored its cached blob from %q\n", ids[i], chunk[i].Path)
		}
		present++
	}
	im.sum.AlreadyPresent += present
	// The previous chunk was recorded while this one's files were read.
	if err := im.wait(); err != nil || len(rows) == 0 {
		return err
	}
	done := make(chan recording, 1)
	im.recording = done
	go func() { done <- im.record(ctx, rows) }()
	return nil
}

// recording is how recording a chunk's new tiles ended.
type recording struct {
	rows, inserted int
	err            error
}

// record makes the chunk's blobs durable, then records their tiles.
func (im *importer) record(ctx context.Context, rows []tilestore.Tile) recording {
	if err := im.blobs.Sync(); err != nil {
		return recording{err: err}
	}
	n, err := im.store.InsertTiles(ctx, rows)
	if err != nil {
		return recording{err: fmt.Errorf("record %d tiles: %w", len(rows), err)}
	}
	return recording{rows: len(rows), inserted: n}
}

// wait waits until the chunk being recorded, if any, is, and counts it.
func (im *importer) wait() error {
	if im.recording == nil {
		return nil
	}
	r := <-im.recording
	im.recording = nil
	// A concurrent import may have recorded some of them first.
	im.sum.Imported += r.inserted
	im.sum.AlreadyPresent += r.rows - r.inserted
	return r.err
}

// dirKey is the cache directory of c's blob, relative to the flight's.
func dirKey(c candidate) [2]int64 { return [2]int64{int64(c.Z), c.X} }

// openDirs opens the cache directory of every new tile of the chunk.
func (im *importer) openDirs(chunk []candidate, ids []string, existing map[string]tilestore.Tile) (map[[2]int64]*tilestore.BlobDir, error) {
	dirs := map[[2]int64]*tilestore.BlobDir{}
	for i, c := range chunk {
		if _, ok := existing[ids[i]]; ok {
			continue
		}
		k := dirKey(c)
		if dirs[k] != nil {
			continue
		}
		d, err := im.blobs.OpenDir(im.opts.FlightID + "/" + strconv.Itoa(c.Z) + "/" + strconv.FormatInt(c.X, 10))
		if err != nil {
			return dirs, fmt.Errorf("import %q: %w", c.Path, err)
		}
		dirs[k] = d
	}
	return dirs, nil
}

// copyNew reads c's file once into a new blob in dir and returns its row.
func (im *importer) copyNew(r *tileReader, dir *tilestore.BlobDir, id string, c candidate) (outcome, error) {
	name := strconv.FormatInt(c.Y, 10) + "." + c.Ext
	nb, err := dir.Create(name)
	if err != nil {
		return outcome{}, fmt.Errorf("copy %q into the cache: %w", c.Path, err)
	}
	got, reason, err := r.copy(c, nb)
	if err != nil || reason != "" {
		nb.Abort()
		if err != nil {
			return outcome{}, fmt.Errorf("copy %q into the cache: %w", c.Path, err)
		}
		return outcome{}, changed(c, reason)
	}
	if err := nb.Commit(); err != nil {
		return outcome{}, fmt.Errorf("copy %q into the cache: %w", c.Path, err)
	}
	return outcome{row: &tilestore.Tile{
		ID: id, FlightID: im.opts.FlightID, Z: c.Z, X: c.X, Y: c.Y,
		ContentType: c.ContentType, SizeBytes: got.Size, SHA256: got.SHA256,
		BlobPath:   fmt.Sprintf("%s/%d/%d/%s", im.opts.FlightID, c.Z, c.X, name),
		CapturedAt: got.ModTime, VotingStatus: tilestore.StatusPending,
	}}, nil
}

// recorded compares c's file with the tile recorded under its ID, and
// repairs the tile's blob from it when they agree.
func (im *importer) recorded(r *tileReader, rec tilestore.Tile, c candidate) (outcome, error) {
	got, reason, err := r.copy(c, nil)
	if err != nil {
		return outcome{}, err
	}
	if reason != "" {
		return outcome{}, changed(c, reason)
	}
	if got.SHA256 != rec.SHA256 {
		return outcome{mismatch: &Mismatch{Path: c.Path, TileID: rec.ID, RecordedSHA256: rec.SHA256, FileSHA256: got.SHA256}}, nil
	}
	repaired, err := repairBlob(im.blobs, rec, c.Path)
	return outcome{repaired: repaired}, err
}

// changed is the error for a file the first pass found valid and the
// second does not.
func changed(c candidate, reason string) error {
	return fmt.Errorf("import %q: the file changed while it was being imported (%s); run the import again", c.Path, reason)
}
