package tiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
)

// DefaultBatchSize is how many tiles go to Postgres per InsertTiles call.
const DefaultBatchSize = 1000

// copyConcurrency is how many tiles are copied into the cache at once.
const copyConcurrency = 8

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

// ImportRun does the import. Nothing is written (no blob, no row) when a
// file is invalid and SkipInvalid is off.
func ImportRun(ctx context.Context, opts *ImportOptions) error {
	tiles, problems, err := scan(ctx, opts.Dir)
	if err != nil {
		return err
	}
	sum := ImportSummary{FlightID: opts.FlightID, FlightState: string(opts.State),
		Found: len(tiles) + len(problems), Invalid: problems}
	if sum.Invalid == nil {
		sum.Invalid = []Problem{}
	}
	sum.Mismatched = []Mismatch{}
	for _, p := range problems {
		fmt.Fprintf(opts.IO.ErrOut, "invalid: %q: %s\n", p.Path, p.Reason)
	}
	if len(problems) > 0 && !opts.SkipInvalid {
		return fmt.Errorf("%d invalid file(s) under %s; nothing was imported "+
			"(fix them, or pass --skip-invalid to import the rest)", len(problems), opts.Dir)
	}
	if len(tiles) == 0 && len(problems) == 0 {
		return fmt.Errorf("no tiles under %q (the layout is %s)", opts.Dir, layout)
	}
	sum.Skipped = len(problems)

	if err := importTiles(ctx, opts, tiles, &sum); err != nil {
		return err
	}
	if err := printSummary(opts, sum); err != nil {
		return err
	}
	var errs []error
	for _, m := range sum.Mismatched {
		fmt.Fprintf(opts.IO.ErrOut, "error: %s\n", m.Error())
	}
	if len(sum.Mismatched) > 0 {
		errs = append(errs, fmt.Errorf("%d file(s) differ from the tiles recorded under their IDs, listed above; "+
			"their records and blobs were kept (import the aircraft's original files, or these under another flight)", len(sum.Mismatched)))
	}
	if sum.Skipped > 0 {
		errs = append(errs, fmt.Errorf("skipped %d invalid file(s), listed above; imported the rest", sum.Skipped))
	}
	if len(errs) > 0 {
		return exitcode.New(exitcode.Failure, errors.Join(errs...))
	}
	return nil
}

func importTiles(ctx context.Context, opts *ImportOptions, tiles []found, sum *ImportSummary) error {
	cfg, err := opts.Config()
	if err != nil {
		return err
	}
	store, err := opts.Store(ctx)
	if err != nil {
		return err
	}
	blobs, err := tilestore.NewBlobStore(cfg.CacheDir)
	if err != nil {
		return err
	}
	if _, err := store.UpsertFlight(ctx, opts.FlightID, opts.State); err != nil {
		return fmt.Errorf("record flight %s: %w", opts.FlightID, err)
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
	}
	for start := 0; start < len(tiles); start += batch {
		chunk := tiles[start:min(start+batch, len(tiles))]
		imported, present, err := importChunk(ctx, opts, store, blobs, chunk, sum)
		if err != nil {
			return err
		}
		sum.Imported += imported
		sum.AlreadyPresent += present
	}
	return nil
}

// importChunk copies the chunk's new tiles into the cache, then records
// them in one InsertTiles. A tile already in the store keeps its record;
// its blob is restored only from a file with the recorded sha256 (so the
// blob never disagrees with the record), and a file with other bytes is a
// Mismatch.
func importChunk(ctx context.Context, opts *ImportOptions, store *tilestore.Store, blobs *tilestore.BlobStore,
	chunk []found, sum *ImportSummary) (imported, present int, err error) {
	ids := make([]string, len(chunk))
	for i, t := range chunk {
		ids[i] = tileID(opts.FlightID, t)
	}
	existing, err := existingTiles(ctx, store, ids)
	if err != nil {
		return 0, 0, err
	}
	var todo, recorded []int
	for i, t := range chunk {
		if rec, ok := existing[ids[i]]; ok {
			present++
			if rec.SHA256 != t.SHA256 {
				sum.Mismatched = append(sum.Mismatched, Mismatch{Path: t.Path, TileID: ids[i],
					RecordedSHA256: rec.SHA256, FileSHA256: t.SHA256})
				continue
			}
			recorded = append(recorded, i)
			continue
		}
		todo = append(todo, i)
	}
	repaired := make([]bool, len(recorded))
	// Blobs are written without a per-file fsync and made durable by one
	// syncfs before their metadata is recorded: a crash can lose a blob only
	// while no row points at it. A few copies at once hide read latency.
	rows := make([]tilestore.Tile, len(todo))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(copyConcurrency)
	for k, i := range todo {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			row, err := copyBlob(opts.FlightID, ids[i], chunk[i], blobs)
			rows[k] = row
			return err
		})
	}
	for k, i := range recorded {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			var err error
			repaired[k], err = repairBlob(blobs, existing[ids[i]], chunk[i])
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	for k, ok := range repaired {
		if ok {
			sum.Repaired++
			fmt.Fprintf(opts.IO.ErrOut, "repaired: tile %s: restored its cached blob from %q\n", ids[recorded[k]], chunk[recorded[k]].Path)
		}
	}
	if err := blobs.Sync(); err != nil {
		return 0, 0, err
	}
	n, err := store.InsertTiles(ctx, rows)
	if err != nil {
		return 0, 0, fmt.Errorf("record %d tiles: %w", len(rows), err)
	}
	// A concurrent import may have recorded some of them first.
	return n, present + len(rows) - n, nil
}

func copyBlob(flightID, id string, t found, blobs *tilestore.BlobStore) (tilestore.Tile, error) {
	rel := fmt.Sprintf("%s/%d/%d/%d.%s", flightID, t.Z, t.X, t.Y, t.Ext)
	f, err := os.OpenFile(t.Path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return tilestore.Tile{}, fmt.Errorf("import %q: %w", t.Path, err)
	}
	defer f.Close()
	size, sha, err := blobs.PutDeferred(rel, f)
	if err != nil {
		return tilestore.Tile{}, fmt.Errorf("copy %q into the cache: %w", t.Path, err)
	}
	if sha != t.SHA256 || size != t.Size {
		return tilestore.Tile{}, fmt.Errorf("import %q: the file changed while it was being imported; run the import again", t.Path)
	}
	return tilestore.Tile{
		ID: id, FlightID: flightID, Z: t.Z, X: t.X, Y: t.Y,
		ContentType: t.ContentType, SizeBytes: size, SHA256: sha, BlobPath: rel,
		CapturedAt: t.ModTime, VotingStatus: tilestore.StatusPending,
	}, nil
}

func tileID(flightID string, t found) string {
	return fmt.Sprintf("%s-%d-%d-%d", flightID, t.Z, t.X, t.Y)
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
