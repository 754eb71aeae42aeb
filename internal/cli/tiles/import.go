package tiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
)

// DefaultBatchSize is how many tiles go to Postgres per InsertTiles call.
const DefaultBatchSize = 1000

// ImportOptions are `tiles import`'s inputs: dependencies first, flags after.
type ImportOptions struct {
	IO     *iostreams.IOStreams
	Config func() (*config.Config, error)
	Store  func(ctx context.Context) (*tilestore.Store, error)

	Dir         string
	FlightID    string
	State       tilestore.FlightState
	SkipInvalid bool
	BatchSize   int
	Output      string // text or json
}

// ImportSummary is what an import did (`-o json` prints it; see README).
type ImportSummary struct {
	FlightID       string    `json:"flight_id"`
	FlightState    string    `json:"flight_state"`
	Found          int       `json:"found"`           // files under the directory, valid or not
	Imported       int       `json:"imported"`        // new tiles recorded
	AlreadyPresent int       `json:"already_present"` // tiles already in the store (records left as they were)
	Repaired       int       `json:"repaired"`        // of those, tiles whose missing or damaged cached blob was restored
	Skipped        int       `json:"skipped"`         // invalid files skipped (--skip-invalid)
	Invalid        []Problem `json:"invalid"`         // every invalid file and why
	// Mismatched lists files whose bytes differ from the tile recorded
	// under their ID; the import exits 1 and keeps the record.
	Mismatched []Mismatch `json:"mismatched"`
}

// NewCmdImport is `tiles import --flight F DIR`.
func NewCmdImport(f *factory.Factory, runF func(context.Context, *ImportOptions) error) *cobra.Command {
	opts := &ImportOptions{IO: f.IOStreams, Config: f.Config, Store: f.Store}
	var state string
	cmd := &cobra.Command{
		Use:   "import --flight F [--state on_ground|airborne] DIR",
		Short: "Import a directory of z/x/y tiles into the cache and the tile store",
		Long: "Import every tile under DIR, laid out as " + layout + ".\n\n" +
			"Each file is checked first (zoom 0..24, x and y inside the zoom's grid, the bytes\n" +
			"really are the image type the extension says); if any file is bad, nothing is\n" +
			"imported unless --skip-invalid is given, which imports the rest and exits 1.\n" +
			"Tiles are copied into the cache (mode 0600) and recorded as pending, with tile ID\n" +
			"<flight>-<z>-<x>-<y>. Importing the same directory again records nothing new; it\n" +
			"restores the cached blob of a recorded, not yet uploaded tile when that blob is\n" +
			"missing or damaged and the file has the recorded sha256 (the repair after\n" +
			"'tilectl tiles verify' lists bad blobs). A file whose bytes differ from the tile\n" +
			"recorded under its ID is an error naming both sha256s; the record is kept.\n" +
			"Hidden files (.name) are ignored. The flight is created, or its state set.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir = args[0]
			// Checked here rather than with MarkFlagRequired, whose error
			// cobra raises where it cannot be marked a usage error.
			if opts.FlightID == "" {
				return exitcode.UsageError(errors.New("--flight is required"))
			}
			if err := tilestore.ValidateFlightID(opts.FlightID); err != nil {
				return exitcode.UsageError(fmt.Errorf("--flight: %w", err))
			}
			switch tilestore.FlightState(state) {
			case tilestore.FlightOnGround, tilestore.FlightAirborne:
				opts.State = tilestore.FlightState(state)
			default:
				return exitcode.UsageError(fmt.Errorf("--state must be on_ground or airborne, got %q", state))
			}
			if opts.Output != "text" && opts.Output != "json" {
				return exitcode.UsageError(fmt.Errorf("-o must be text or json, got %q", opts.Output))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return ImportRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.FlightID, "flight", "", "flight ID (required)")
	cmd.Flags().StringVar(&state, "state", string(tilestore.FlightOnGround), "flight state to record: on_ground or airborne")
	cmd.Flags().BoolVar(&opts.SkipInvalid, "skip-invalid", false, "import the valid tiles, skip and list the invalid ones, exit 1")
	cmd.Flags().IntVar(&opts.BatchSize, "batch-size", DefaultBatchSize, "tiles per database insert")
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "text", "summary format: text or json")
	return cmd
}

// ImportRun does the import in two passes over the directory. The first
// checks every file (scan) and keeps only the problems; nothing is written
// (no blob, no row) when a file is invalid and SkipInvalid is off. The
// second imports the valid files a chunk at a time (importer), so memory
// does not grow with the directory.
func ImportRun(ctx context.Context, opts *ImportOptions) error {
	cfg, err := opts.Config()
	if err != nil {
		return err
	}
	space, err := cacheSpace(cfg.CacheDir)
	if err != nil {
		return fmt.Errorf("cache %s (cache_dir, from %s): %w", cfg.CacheDir, cfg.Source("cache_dir"), err)
	}
	valid, problems, footprint, err := scan(ctx, opts.Dir, space.Block)
	if err != nil {
		return err
	}
	sum := ImportSummary{FlightID: opts.FlightID, FlightState: string(opts.State),
		Found: valid + len(problems), Invalid: problems}
	if sum.Invalid == nil {
		sum.Invalid = []Problem{}
	}
	sum.Mismatched = []Mismatch{}
	for _, p := range problems {
		fmt.Fprintf(opts.IO.ErrOut, "invalid: %q: %s\n", p.Path, p.Reason)
	}
	if len(problems) > 0 && !opts.SkipInvalid {
		return fmt.Errorf("%s under %s; nothing was imported "+
			"(fix them, or pass --skip-invalid to import the rest)", iostreams.Count(len(problems), "invalid file", "invalid files"), opts.Dir)
	}
	if valid == 0 && len(problems) == 0 {
		return fmt.Errorf("no tiles under %q (the layout is %s)", opts.Dir, layout)
	}
	sum.Skipped = len(problems)

	if err := importTiles(ctx, opts, problems, space, footprint, &sum); err != nil {
		return diskFull(cfg, &sum, err)
	}
	if err := printSummary(opts, sum); err != nil {
		return err
	}
	var errs []error
	for _, m := range sum.Mismatched {
		fmt.Fprintf(opts.IO.ErrOut, "error: %s\n", m.Error())
	}
	if len(sum.Mismatched) > 0 {
		errs = append(errs, fmt.Errorf("%s from the tiles recorded under their IDs, listed above; "+
			"their records and blobs were kept (import the aircraft's original files, or these under another flight)",
			iostreams.Count(len(sum.Mismatched), "file differs", "files differ")))
	}
	if sum.Skipped > 0 {
		errs = append(errs, fmt.Errorf("skipped %s, listed above; imported the rest", iostreams.Count(sum.Skipped, "invalid file", "invalid files")))
	}
	if len(errs) > 0 {
		return exitcode.New(exitcode.Failure, errors.Join(errs...))
	}
	return nil
}

// importTiles is the second pass: it walks opts.Dir again and imports
// every file the first pass did not list in problems.
func importTiles(ctx context.Context, opts *ImportOptions, problems []Problem, space diskSpace, footprint int64, sum *ImportSummary) error {
	cfg, err := opts.Config()
	if err != nil {
		return err
	}
	store, err := opts.Store(ctx)
	if err != nil {
		return err
	}
	// The space is checked before anything is written: an import that
	// would fill the disk writes nothing at all.
	need, err := spaceNeeded(ctx, store, opts.FlightID, footprint, space.Block)
	if err != nil {
		return err
	}
	if err := checkSpace(cfg, space, need); err != nil {
		return err
	}
	// The cache is checked before the flight is recorded: a cache the
	// import cannot write fails it with nothing left behind.
	blobs, err := tilestore.NewBlobStore(cfg.CacheDir)
	if err == nil {
		err = blobs.CheckWritable(opts.FlightID)
	}
	if err != nil {
		return fmt.Errorf("cannot write the blob cache %s (cache_dir, from %s): %w; nothing was imported: "+
			"point cache_dir at a directory tilectl can write (--cache-dir, TILECTL_CACHE_DIR or cache_dir in the config file)",
			cfg.CacheDir, cfg.Source("cache_dir"), err)
	}
	// Held shared for the whole import: flights delete takes it exclusive,
	// so it never removes blobs this import is about to record.
	lock, err := blobs.LockFlight(opts.FlightID, false)
	if errors.Is(err, tilestore.ErrFlightCacheBusy) {
		return fmt.Errorf("flight %s is being deleted ('tilectl flights delete' holds its cache lock): nothing was imported; "+
			"import it again once the delete has ended", opts.FlightID)
	}
	if err != nil {
		return err
	}
	defer lock.Release()
	if _, err := store.UpsertFlight(ctx, opts.FlightID, opts.State); err != nil {
		return fmt.Errorf("record flight %s: %w", opts.FlightID, err)
	}
	im := newImporter(opts, store, blobs, sum)
	for _, p := range problems {
		im.skip[p.Path] = true
	}
	err = walkTiles(ctx, opts.Dir, func(c candidate) error { return im.add(ctx, c) }, func(Problem) {})
	return im.finish(ctx, err)
}

func tileID(flightID string, c candidate) string {
	return fmt.Sprintf("%s-%d-%d-%d", flightID, c.Z, c.X, c.Y)
}

func printSummary(opts *ImportOptions, s ImportSummary) error {
	if opts.Output == "json" {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	dir, _ := filepath.Abs(opts.Dir)
	fmt.Fprintf(opts.IO.Out, "flight %s (%s): from %s\n", s.FlightID, s.FlightState, dir)
	fmt.Fprintf(opts.IO.Out, "  found            %d\n  imported         %d\n  already present  %d\n  repaired blobs   %d\n  skipped invalid  %d\n",
		s.Found, s.Imported, s.AlreadyPresent, s.Repaired, s.Skipped)
	if len(s.Mismatched) > 0 {
		fmt.Fprintf(opts.IO.Out, "  differ from record %d\n", len(s.Mismatched))
	}
	return nil
}
