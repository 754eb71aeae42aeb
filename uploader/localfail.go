package uploader

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tilectl/tilectl/tilestore"
)

// maxListedLocalFailures bounds the LocalFailures list of one report, so a
// report stays small however many blobs are bad; LocalFailed counts them
// all.
const maxListedLocalFailures = 1000

// localFailure names a tile left pending because of its blob, in a WARN
// line and in the report. Nothing is recorded in the store: the tile keeps
// its attempts and is sent by the first run after the blob is mended.
func (u *Client) localFailure(rep *runReport, lf LocalFailure) {
	u.log.Warn().Str("tile_id", lf.TileID).Str("cache_path", lf.CachePath).Str("problem", lf.Problem).
		Str("detail", lf.Message).
		Msg("tile not sent: its cached blob is bad (not counted as an attempt; run 'tilectl tiles verify' and import the original directory again)")
	rep.localFailure(lf)
}

// BlobCacheError: none of the blobs checked before the first batch exists.
// The cache dir is then almost surely not the one the flight was imported
// into; nothing was sent and nothing was counted.
type BlobCacheError struct {
	FlightID string
	CacheDir string // "" when the blob source cannot say
	// Source says where the cache dir's value came from ("flag
	// --cache-dir", "environment TILECTL_CACHE_DIR", ...); "" if unknown.
	Source  string
	Checked int // pending tiles checked, all missing
	Example string
}

func (e *BlobCacheError) Error() string {
	dir := e.CacheDir
	if dir == "" {
		dir = "(unknown)"
	}
	src := ""
	if e.Source != "" {
		src = " (" + e.Source + ")"
	}
	checked := fmt.Sprintf("none of the %d pending tiles checked has its", e.Checked)
	if e.Checked == 1 {
		checked = "the one pending tile checked has no"
	}
	return fmt.Sprintf("flight %s: %s blob in the cache dir %s%s, "+
		"for example %s; nothing was sent and no attempt was counted. "+
		"Check that this is the cache dir the flight was imported into (tiles import uses the same "+
		"--cache-dir, TILECTL_CACHE_DIR or cache_dir setting) and run again with the right one; "+
		"if it is, the blobs were deleted: run 'tilectl tiles verify --flight %s' and import the flight's "+
		"original directory again", e.FlightID, checked, dir, src, e.Example, e.FlightID)
}

// firstPage is the first page of the flight's pending tiles, which the
// pre-flight checks and whose sizes say how big the run's batches are.
func (u *Client) firstPage(ctx context.Context, flightID string) ([]tilestore.Tile, error) {
	page, err := u.store.PendingUploads(ctx, flightID, "", pageSize)
	if err != nil {
		return nil, fmt.Errorf("pre-flight: list pending tiles of flight %s: %w", flightID, err)
	}
	return page, nil
}

// preflight checks the blobs of page, the first of the flight's pending
// tiles, by existence and size only, before anything is sent. When not one
// of them exists, and neither does their top directory in the cache, it
// returns a *BlobCacheError: sending would only turn a wrong cache dir into
// a local failure per tile. The first blob found ends the check: one blob
// in place shows the cache dir is the flight's, and stating every blob of
// the page would delay the start of every run.
func (u *Client) preflight(flightID string, page []tilestore.Tile) error {
	missing, example, firstRel := 0, "", ""
	for _, tl := range page {
		lf, err := CheckBlob(u.blobs, tl, CheckSize)
		if err != nil {
			return err
		}
		if lf == nil || lf.Problem != ProblemBlobMissing {
			return nil // a blob is there: the cache dir is right
		}
		if missing == 0 {
			example, firstRel = lf.CachePath, tl.BlobPath
		}
		missing++
	}
	if len(page) == 0 {
		return nil
	}
	e := &BlobCacheError{FlightID: flightID, Source: u.cacheDirSource, Checked: missing, Example: example}
	if r, ok := u.blobs.(interface{ Root() string }); ok {
		e.CacheDir = r.Root()
		// The blobs' top directory (the flight's, as tiles import lays
		// them out) is there: this is the right cache and only these
		// blobs are gone. The send path names each one instead.
		if top, _, nested := strings.Cut(firstRel, "/"); nested {
			if st, err := os.Stat(filepath.Join(e.CacheDir, filepath.FromSlash(top))); err == nil && st.IsDir() {
				return nil
			}
		}
	}
	return e
}
