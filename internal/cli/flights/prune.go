package flights

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
)

// PruneStore is what `flights prune` changes and measures.
type PruneStore interface {
	Flight(ctx context.Context, id string) (tilestore.Flight, error)
	Prune(ctx context.Context, blobs *tilestore.BlobStore, req tilestore.PruneRequest) (tilestore.PruneResult, error)
	JournalBytes(ctx context.Context) (journal, tiles int64, err error)
}

var _ PruneStore = (*tilestore.Store)(nil)

// PruneOptions are `flights prune`'s inputs.
type PruneOptions struct {
	IO     *iostreams.IOStreams
	Config func() (*config.Config, error)
	Store  func(ctx context.Context) (PruneStore, error)
	Now    func() time.Time

	FlightID       string // "" = every flight
	UploadedBefore string // an age (7d); "" = every uploaded tile
	DryRun         bool
	Output         string
}

// PruneReport is `flights prune -o json`'s output (see the package doc).
type PruneReport struct {
	DryRun         bool       `json:"dry_run"`
	FlightID       *string    `json:"flight_id"`       // null: every flight
	UploadedBefore *time.Time `json:"uploaded_before"` // null: every uploaded tile
	Disk           PruneDisk  `json:"disk"`
	Database       PruneDB    `json:"database"`
	Error          *string    `json:"error"`
}

// PruneDisk is what a prune freed in the cache.
type PruneDisk struct {
	Tiles         int64 `json:"tiles"`          // tiles whose blob is now pruned
	Files         int64 `json:"files"`          // blob files removed
	Bytes         int64 `json:"bytes"`          // space the removed files took on disk
	RecordedBytes int64 `json:"recorded_bytes"` // the pruned tiles' recorded sizes
	AlreadyGone   int64 `json:"already_gone"`   // pruned tiles whose blob was already missing
	KeptShared    int64 `json:"kept_shared"`    // uploaded tiles whose blob another tile still needs
	Dirs          int64 `json:"dirs"`           // directories left empty and removed
}

// PruneDB is what a prune dropped from the database.
type PruneDB struct {
	Flights    []string `json:"flights"`    // finished flights whose journal was pruned
	Batches    int64    `json:"batches"`    // upload_batches rows
	Rejections int64    `json:"rejections"` // upload_rejections rows
	RowBytes   int64    `json:"row_bytes"`  // the dropped rows' stored size
	// The journal's tables (upload_batches, upload_rejections with their
	// indexes and TOAST) before and after, as pg_total_relation_size: space
	// the rows leave is reused by Postgres, so these fall only once
	// (auto)vacuum truncates the tables.
	JournalTableBytesBefore int64 `json:"journal_table_bytes_before"`
	JournalTableBytesAfter  int64 `json:"journal_table_bytes_after"`
}

// NewCmdPrune is `flights prune [--flight F] [--uploaded-before AGE] [--dry-run] [-o text|json]`.
func NewCmdPrune(f *factory.Factory, runF func(context.Context, *PruneOptions) error) *cobra.Command {
	opts := &PruneOptions{IO: f.IOStreams, Config: f.Config, Now: f.Now,
		Store: func(ctx context.Context) (PruneStore, error) { return f.Store(ctx) }}
	cmd := &cobra.Command{
		Use:   "prune [--flight F] [--uploaded-before AGE] [--dry-run] [-o text|json]",
		Short: "Free the cached blobs of uploaded tiles and the journal rows finished flights no longer need",
		Long: "Remove from the cache the blobs of tiles the provider holds (uploaded), of one flight\n" +
			"or of all, and only those uploaded longer ago than --uploaded-before (7d, 36h) when\n" +
			"given. A tile that is pending, trusted, given up, rejected by the vote or in an open\n" +
			"batch keeps its blob, and so does a blob another such tile names. Each pruned tile\n" +
			"keeps its row and status; 'tiles verify' and 'tiles requeue' say its bytes are gone.\n\n" +
			"For a finished flight (no tile waiting to be sent, no open batch) it also drops the\n" +
			"upload journal's rows nothing reads again: settled batches with their member lists,\n" +
			"failed batches whose members are all uploaded, and the counted rejections of\n" +
			"uploaded tiles. Each tile's status, attempts and give-up, and the run history, stay.\n\n" +
			"It says what it freed: files and bytes on disk, rows and their bytes in the database.\n" +
			"--dry-run says what it would free and changes nothing. Safe beside a running\n" +
			"upload-pending or tiles import.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := iostreams.CheckOutput(opts.Output); err != nil {
				return exitcode.UsageError(err)
			}
			if opts.FlightID != "" {
				if err := tilestore.ValidateFlightID(opts.FlightID); err != nil {
					return exitcode.UsageError(fmt.Errorf("--flight: %w", err))
				}
			}
			if opts.UploadedBefore != "" {
				if _, err := config.ParseAge(opts.UploadedBefore); err != nil {
					return exitcode.UsageError(fmt.Errorf("--uploaded-before: %w", err))
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return PruneRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.FlightID, "flight", "", "prune only this flight (default: every flight)")
	fl.StringVar(&opts.UploadedBefore, "uploaded-before", "", "only tiles uploaded longer ago than this age (7d, 36h)")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "say what would be freed, change nothing")
	iostreams.AddOutputFlag(cmd, &opts.Output)
	return cmd
}

// PruneRun prunes and reports; with -o json it prints one object on every
// exit.
func PruneRun(ctx context.Context, opts *PruneOptions) error {
	rep := PruneReport{DryRun: opts.DryRun, Database: PruneDB{Flights: []string{}}}
	if opts.FlightID != "" {
		rep.FlightID = &opts.FlightID
	}
	err := prune(ctx, opts, &rep)
	if err != nil {
		msg := err.Error()
		rep.Error = &msg
	}
	return opts.IO.Report(opts.Output, rep, err, func() { printPrune(opts, rep) })
}

func prune(ctx context.Context, opts *PruneOptions, rep *PruneReport) error {
	cfg, err := opts.Config()
	if err != nil {
		return err
	}
	req := tilestore.PruneRequest{FlightID: opts.FlightID, DryRun: opts.DryRun}
	if opts.UploadedBefore != "" {
		age, _ := config.ParseAge(opts.UploadedBefore)
		t := opts.Now().Add(-age).UTC()
		req.UploadedBefore, rep.UploadedBefore = t, &t
	}
	store, err := opts.Store(ctx)
	if err != nil {
		return err
	}
	if opts.FlightID != "" {
		if _, err := store.Flight(ctx, opts.FlightID); errors.Is(err, tilestore.ErrFlightNotFound) {
			return exitcode.UsageError(fmt.Errorf("flight %s is not recorded: nothing was pruned; "+
				"'tilectl flights list' lists the recorded flights", opts.FlightID))
		} else if err != nil {
			return err
		}
	}
	blobs, err := tilestore.NewBlobStore(cfg.CacheDir)
	if err != nil {
		return fmt.Errorf("open the blob cache %s (cache_dir, from %s): %w", cfg.CacheDir, cfg.Source("cache_dir"), err)
	}
	if rep.Database.JournalTableBytesBefore, _, err = store.JournalBytes(ctx); err != nil {
		return err
	}
	res, err := store.Prune(ctx, blobs, req)
	rep.Disk = PruneDisk{Tiles: res.Tiles, Files: res.Files, Bytes: res.DiskBytes, RecordedBytes: res.RecordedBytes,
		AlreadyGone: res.Missing, KeptShared: res.KeptShared, Dirs: res.DirsRemoved}
	if res.Journal.Flights != nil {
		rep.Database.Flights = res.Journal.Flights
	}
	rep.Database.Batches, rep.Database.Rejections, rep.Database.RowBytes = res.Journal.Batches, res.Journal.Rejections, res.Journal.RowBytes
	if err != nil {
		return err
	}
	rep.Database.JournalTableBytesAfter, _, err = store.JournalBytes(ctx)
	return err
}

func printPrune(opts *PruneOptions, r PruneReport) {
	w := opts.IO.Out
	verb, dverb := "freed", "dropped"
	if r.DryRun {
		verb, dverb = "would free", "would drop"
	}
	scope := "every flight"
	if r.FlightID != nil {
		scope = "flight " + *r.FlightID
	}
	if r.UploadedBefore != nil {
		scope += ", tiles uploaded before " + r.UploadedBefore.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "prune (%s):\n", scope)
	fmt.Fprintf(w, "  disk: %s %s in %s (blobs of %s; recorded sizes %s)",
		verb, iostreams.HumanBytes(r.Disk.Bytes), iostreams.Count(r.Disk.Files, "file", "files"),
		iostreams.Count(r.Disk.Tiles, "uploaded tile", "uploaded tiles"), iostreams.HumanBytes(r.Disk.RecordedBytes))
	if r.Disk.Dirs > 0 {
		fmt.Fprintf(w, ", %s removed", iostreams.Count(r.Disk.Dirs, "empty directory", "empty directories"))
	}
	fmt.Fprintln(w)
	if r.Disk.AlreadyGone > 0 {
		fmt.Fprintf(w, "  %s already had no blob in the cache\n", iostreams.Count(r.Disk.AlreadyGone, "tile", "tiles"))
	}
	if r.Disk.KeptShared > 0 {
		fmt.Fprintf(w, "  kept the blobs of %s: a tile not yet uploaded names the same file\n",
			iostreams.Count(r.Disk.KeptShared, "uploaded tile", "uploaded tiles"))
	}
	fmt.Fprintf(w, "  database: %s %s and %s (%s of row data) of %s\n", dverb,
		iostreams.Count(r.Database.Batches, "settled batch", "settled batches"),
		iostreams.Count(r.Database.Rejections, "counted rejection", "counted rejections"),
		iostreams.HumanBytes(r.Database.RowBytes), iostreams.Count(len(r.Database.Flights), "finished flight", "finished flights"))
	fmt.Fprintf(w, "  journal tables: %s before, %s after (Postgres reuses the space the rows leave)\n",
		iostreams.HumanBytes(r.Database.JournalTableBytesBefore), iostreams.HumanBytes(r.Database.JournalTableBytesAfter))
}
