package flights

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/whoami"
	"github.com/tilectl/tilectl/tilestore"
)

// DeletedKind is the flight-data record kind of a flight removed by
// `flights delete`.
const DeletedKind = "flight.deleted"

// DeletedPayload is what the record of a deletion keeps.
type DeletedPayload struct {
	FlightID string `json:"flight_id"`
	Reason   string `json:"reason"`
	User     string `json:"user"`
	Host     string `json:"host"`
	Forced   bool   `json:"forced"`
	Tiles    int64  `json:"tiles"`
	// Waiting and OpenBatches are what the flight still had to send: not
	// 0 only for a forced delete.
	Waiting     int64     `json:"waiting"`
	OpenBatches int64     `json:"open_batches"`
	DeletedAt   time.Time `json:"deleted_at"`
}

// DeleteStore is what `flights delete` reads and changes.
type DeleteStore interface {
	Hold(ctx context.Context, flightID string) (tilestore.FlightHold, error)
	DeleteFlight(ctx context.Context, flightID string, force bool,
		beforeCommit func(context.Context, tilestore.DeletedFlight) error) (tilestore.DeletedFlight, error)
}

var _ DeleteStore = (*tilestore.Store)(nil)

// DeleteOptions are `flights delete`'s inputs.
type DeleteOptions struct {
	IO     *iostreams.IOStreams
	Config func() (*config.Config, error)
	Store  func(ctx context.Context) (DeleteStore, error)
	Now    func() time.Time
	// StdinTTY says whether a person can answer the confirmation.
	StdinTTY bool

	FlightID string
	Reason   string
	Force    bool
	Yes      bool
	Output   string
}

// DeleteReport is `flights delete -o json`'s output.
type DeleteReport struct {
	FlightID   string  `json:"flight_id"`
	Deleted    bool    `json:"deleted"`
	Forced     bool    `json:"forced"`
	Tiles      int64   `json:"tiles"`
	Batches    int64   `json:"batches"`
	Rejections int64   `json:"rejections"`
	Runs       int64   `json:"runs"`
	Files      int64   `json:"files"`
	DiskBytes  int64   `json:"disk_bytes"`
	Error      *string `json:"error"`
}

// NewCmdDelete is `flights delete F --reason TEXT [--force] [--yes]`.
func NewCmdDelete(f *factory.Factory, runF func(context.Context, *DeleteOptions) error) *cobra.Command {
	opts := &DeleteOptions{IO: f.IOStreams, Config: f.Config, Now: f.Now,
		Store: func(ctx context.Context) (DeleteStore, error) { return f.Store(ctx) }}
	cmd := &cobra.Command{
		Use:   "delete F --reason TEXT [--force] [--yes]",
		Short: "Delete a flight: its tiles, journal, run history and cached blobs",
		Long: "Remove flight F from the database (its tiles, upload batches, rejections and run\n" +
			"history) and its blobs from the cache, after writing one durable flight-data record\n" +
			"(kind " + DeletedKind + ") with the flight, the reason, the OS user and host.\n\n" +
			"Refused while the flight has tiles waiting to be sent (pending, trusted) or open\n" +
			"batches, or while an upload-pending run is working on it (a live lease, or a run of\n" +
			"this machine that holds its run lock), unless --force. Refused while a tiles import\n" +
			"of the flight is running, --force or not. Asks for the flight ID on a terminal;\n" +
			"off one, --yes confirms.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.FlightID = args[0]
			if err := iostreams.CheckOutput(opts.Output); err != nil {
				return exitcode.UsageError(err)
			}
			if err := tilestore.ValidateFlightID(opts.FlightID); err != nil {
				return exitcode.UsageError(fmt.Errorf("flight: %w", err))
			}
			if strings.TrimSpace(opts.Reason) == "" {
				return exitcode.UsageError(errors.New("--reason is required: say why the flight is deleted (it is kept in the flight data recorder)"))
			}
			opts.StdinTTY = f.IOStreams.IsStdinTTY()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return DeleteRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Reason, "reason", "", "why the flight is deleted (required; recorded)")
	fl.BoolVar(&opts.Force, "force", false, "delete even with tiles waiting, open batches or a run working on the flight")
	fl.BoolVar(&opts.Yes, "yes", false, "do not ask for confirmation (needed off a terminal)")
	iostreams.AddOutputFlag(cmd, &opts.Output)
	return cmd
}

// DeleteRun deletes the flight; with -o json it prints one object on every
// exit.
func DeleteRun(ctx context.Context, opts *DeleteOptions) error {
	rep := DeleteReport{FlightID: opts.FlightID, Forced: opts.Force}
	err := deleteFlight(ctx, opts, &rep)
	if err != nil {
		msg := err.Error()
		rep.Error = &msg
	}
	return opts.IO.Report(opts.Output, rep, err, func() {
		fmt.Fprintf(opts.IO.Out, "flight %s deleted (recorded as %s): %s, %s, %s, %s; "+
			"freed %s in %s from the cache\n", rep.FlightID, DeletedKind,
			iostreams.Count(rep.Tiles, "tile", "tiles"), iostreams.Count(rep.Batches, "batch", "batches"),
			iostreams.Count(rep.Rejections, "rejection", "rejections"), iostreams.Count(rep.Runs, "run", "runs"),
			iostreams.HumanBytes(rep.DiskBytes), iostreams.Count(rep.Files, "file", "files"))
	})
}

func deleteFlight(ctx context.Context, opts *DeleteOptions, rep *DeleteReport) error {
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
		return fmt.Errorf("open the blob cache %s (cache_dir, from %s): %w", cfg.CacheDir, cfg.Source("cache_dir"), err)
	}
	lock, err := blobs.LockFlight(opts.FlightID, true)
	if errors.Is(err, tilestore.ErrFlightCacheBusy) {
		return exitcode.New(exitcode.Failure, fmt.Errorf("a tiles import of flight %s is running (it holds the flight's cache lock): "+
			"nothing was deleted; delete the flight once the import has ended", opts.FlightID))
	}
	if err != nil {
		return err
	}
	defer lock.Release()
	hold, err := store.Hold(ctx, opts.FlightID)
	if errors.Is(err, tilestore.ErrFlightNotFound) {
		return exitcode.UsageError(fmt.Errorf("flight %s is not recorded: nothing was deleted; "+
			"'tilectl flights list' lists the recorded flights", opts.FlightID))
	}
	if err != nil {
		return err
	}
	if !opts.Force {
		if err := refuseWhileInUse(cfg, hold); err != nil {
			return err
		}
	}
	if !opts.Yes {
		if err := opts.confirm(hold); err != nil {
			return err
		}
	}
	rec, err := fdr.Open(ctx, cfg.FDRPath, fdr.Options{Capacity: cfg.FDRCapacityBytes})
	if err != nil {
		return fmt.Errorf("open the flight data recorder %s: %w; nothing was deleted", cfg.FDRPath, err)
	}
	defer rec.Close()
	who, host := whoami.User(), whoami.Host()
	var freed tilestore.RemovedFiles
	d, err := store.DeleteFlight(ctx, opts.FlightID, opts.Force, func(ctx context.Context, d tilestore.DeletedFlight) error {
		if _, err := rec.Append(ctx, fdr.Entry{Kind: DeletedKind, Durable: true,
			Key: fmt.Sprintf("deleted/%s/%d", d.Hold.FlightID, d.Hold.RowVersion.UnixNano()),
			Payload: DeletedPayload{FlightID: d.Hold.FlightID, Reason: opts.Reason, User: who, Host: host, Forced: opts.Force,
				Tiles: d.Hold.Tiles, Waiting: d.Hold.Waiting, OpenBatches: d.Hold.OpenBatches, DeletedAt: opts.Now().UTC()}}); err != nil {
			return fmt.Errorf("record the deletion: %w", err)
		}
		// The blobs go before the rows are committed: a crash or an error
		// here leaves the flight recorded, and deleting it again finishes.
		var outside []string
		for _, p := range d.BlobPaths {
			if !strings.HasPrefix(p, d.Hold.FlightID+"/") {
				outside = append(outside, path.Clean(p))
			}
		}
		var err error
		if freed, err = blobs.RemoveFlightDir(d.Hold.FlightID, false); err != nil {
			return err
		}
		more, err := blobs.RemoveBlobs(outside)
		freed.Files, freed.DiskBytes = freed.Files+more.Files, freed.DiskBytes+more.DiskBytes
		return err
	})
	var busy *tilestore.FlightBusyError
	if errors.As(err, &busy) {
		return exitcode.New(exitcode.Failure, fmt.Errorf("%w: nothing was deleted; let upload-pending finish, or pass --force", busy))
	}
	if err != nil {
		return err
	}
	*rep = DeleteReport{FlightID: opts.FlightID, Deleted: true, Forced: opts.Force, Tiles: d.Tiles, Batches: d.Batches,
		Rejections: d.Rejections, Runs: d.Runs, Files: freed.Files, DiskBytes: freed.DiskBytes}
	return nil
}

// refuseWhileInUse refuses a flight with tiles to send, open batches, or a
// run working on it: a live lease (any host), or an unfinished run of this
// machine whose run lock a process holds.
func refuseWhileInUse(cfg *config.Config, h tilestore.FlightHold) error {
	locks := tilestore.NewRunLocks(cfg.CacheDir)
	var alive []string
	for _, r := range h.UnfinishedRuns {
		if st, _ := locks.State(r.RunID); st == tilestore.RunAlive {
			alive = append(alive, fmt.Sprintf("run %s (host %s, pid %d, started %s)", r.RunID, r.Host, r.PID, r.StartedAt.UTC().Format(time.RFC3339)))
		}
	}
	var why []string
	if len(alive) > 0 {
		why = append(why, "an upload-pending run is working on it: "+strings.Join(alive, ", "))
	} else if h.LiveLeases > 0 {
		why = append(why, fmt.Sprintf("an upload-pending run holds %s of it under a live lease", iostreams.Count(h.LiveLeases, "open batch", "open batches")))
	}
	if h.Waiting > 0 {
		why = append(why, fmt.Sprintf("%s not yet uploaded (pending or trusted)", iostreams.Count(h.Waiting, "tile is", "tiles are")))
	}
	if h.OpenBatches > 0 {
		why = append(why, fmt.Sprintf("%s (%s) may be at the provider unsettled",
			iostreams.Count(h.OpenBatches, "open batch", "open batches"), iostreams.Count(h.OpenTiles, "tile", "tiles")))
	}
	if len(why) == 0 {
		return nil
	}
	return exitcode.New(exitcode.Failure, fmt.Errorf("flight %s is still in use: %s; nothing was deleted "+
		"(let upload-pending finish, or pass --force to delete it anyway)", h.FlightID, strings.Join(why, "; ")))
}

// confirm asks for the flight ID on a terminal; off one it refuses (the
// caller passes --yes to mean it).
func (opts *DeleteOptions) confirm(h tilestore.FlightHold) error {
	what := fmt.Sprintf("flight %s with %s (%s not yet uploaded) and its cached blobs", h.FlightID,
		iostreams.Count(h.Tiles, "tile", "tiles"), iostreams.Count(h.Waiting, "tile", "tiles"))
	if !opts.StdinTTY {
		return exitcode.UsageError(fmt.Errorf("flights delete would remove %s; pass --yes to confirm (no terminal to ask on)", what))
	}
	if !opts.IO.Confirm(fmt.Sprintf("flights delete removes %s. Type the flight ID to go on: ", what), h.FlightID) {
		return exitcode.New(exitcode.Failure, errors.New("not confirmed; nothing was deleted"))
	}
	return nil
}
