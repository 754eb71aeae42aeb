package tiles

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
)

// diskSpace is a filesystem's size, what an unprivileged writer may still
// use of it, and its block size (statfs(2)).
type diskSpace struct {
	Dir          string // the directory asked about (the cache, or its nearest existing parent)
	Total, Avail int64
	Block        int64
}

// cacheSpace reads the space of the filesystem that holds dir, or, before
// the cache exists, of its nearest existing parent.
func cacheSpace(dir string) (diskSpace, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return diskSpace{}, err
	}
	for {
		var st unix.Statfs_t
		err := unix.Statfs(d, &st)
		if err == nil {
			return diskSpace{Dir: d, Total: int64(st.Blocks) * st.Bsize, Avail: int64(st.Bavail) * st.Bsize, Block: st.Bsize}, nil
		}
		if !errors.Is(err, unix.ENOENT) || filepath.Dir(d) == d {
			return diskSpace{}, fmt.Errorf("read the free space of %s: %w", d, err)
		}
		d = filepath.Dir(d)
	}
}

// checkSpace refuses an import whose new blobs (need, in whole blocks)
// would leave less than cache.min_free on the cache's filesystem.
func checkSpace(cfg *config.Config, space diskSpace, need int64) error {
	if space.Total <= 0 {
		return nil // a filesystem that reports no size (proc, some FUSE): nothing to measure against
	}
	m := cfg.CacheMinFree()
	reserve := m.Reserve(space.Total)
	if space.Avail-need >= reserve {
		return nil
	}
	return exitcode.New(exitcode.Failure, fmt.Errorf("not enough free space for the import in the cache %s (cache_dir, from %s): "+
		"its new tiles need %s and the filesystem has %s free of %s, which would leave %s, less than the reserve of %s "+
		"(cache.min_free %s, from %s); nothing was imported: free space with 'tilectl flights prune' "+
		"(the blobs of uploaded tiles) or 'tilectl flights delete', or lower cache.min_free",
		cfg.CacheDir, cfg.Source("cache_dir"), iostreams.HumanBytes(need), iostreams.HumanBytes(space.Avail),
		iostreams.HumanBytes(space.Total), iostreams.HumanBytes(max(space.Avail-need, 0)), iostreams.HumanBytes(reserve),
		m, cfg.Source("cache.min_free")))
}

// spaceNeeded is what an import of files taking footprint (block-rounded)
// will write: tiles the flight already has recorded are not written again,
// so their rounded sizes are taken off.
func spaceNeeded(ctx context.Context, store *tilestore.Store, flightID string, footprint, block int64) (int64, error) {
	recorded, err := store.FlightFootprint(ctx, flightID, block)
	if err != nil {
		return 0, err
	}
	return max(footprint-recorded, 0), nil
}

// diskFull rewrites an import that ran out of space (ENOSPC, EDQUOT) into
// an error that says so, what was recorded and what to do.
func diskFull(cfg *config.Config, sum *ImportSummary, err error) error {
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return err
	}
	free := "unknown"
	if sp, serr := cacheSpace(cfg.CacheDir); serr == nil {
		free = iostreams.HumanBytes(sp.Avail)
	}
	return exitcode.New(exitcode.Failure, fmt.Errorf("the cache's filesystem is full (cache %s, %s free): %w; "+
		"%s recorded whole, each with its blob on disk, and nothing of the chunk being written was recorded "+
		"(its new blobs were removed); free space ('tilectl flights prune', 'tilectl flights delete') "+
		"and run the same import again to complete it", cfg.CacheDir, free, err,
		iostreams.Count(sum.Imported, "tile was", "tiles were")))
}
