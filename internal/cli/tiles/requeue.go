package tiles

import (
	"context"
	"errors"
	"fmt"
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

// RequeueKind is the flight-data record kind of one requeued tile.
const RequeueKind = "upload.requeue"

// RequeuePayload is what the record of a requeue keeps: who moved which
// given-up tile back, why, and what it had spent.
type RequeuePayload struct {
	TileID           string    `json:"tile_id"`
	FlightID         string    `json:"flight_id"`
	Reason           string    `json:"reason"`
	PreviousAttempts int       `json:"previous_attempts"`
	Requeue          int       `json:"requeue"` // 1 for the tile's first requeue
	User             string    `json:"user"`
	Host             string    `json:"host"`
	RequeuedAt       time.Time `json:"requeued_at"`
}

// RequeueOptions are `tiles requeue`'s inputs.
type RequeueOptions struct {
	IO     *iostreams.IOStreams
	Config func() (*config.Config, error)
	Store  func(ctx context.Context) (*tilestore.Store, error)
	// StdinTTY says whether a person can answer the confirmation.
	StdinTTY bool

	FlightID   string
	TileIDs    []string
	AllGivenUp bool
	Reason     string
	Yes        bool
}

// NewCmdRequeue is `tiles requeue --flight F (--tile ID ... | --all-given-up) --reason TEXT [--yes]`.
func NewCmdRequeue(f *factory.Factory, runF func(context.Context, *RequeueOptions) error) *cobra.Command {
	opts := &RequeueOptions{IO: f.IOStreams, Config: f.Config, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "requeue --flight F (--tile ID ... | --all-given-up) --reason TEXT [--yes]",
		Short: "Move given-up tiles back to pending with a fresh attempt budget",
		Long: "Move tiles that were given up (upload_giveup) back to pending: the human decision\n" +
			"a give-up asks for, once its cause is fixed. Each tile gets a fresh per-tile budget\n" +
			"(retry.max_per_tile_attempts counts from now); the attempts it already spent stay\n" +
			"in 'tilectl status'. Each requeue writes one durable flight-data record (kind\n" +
			RequeueKind + ") with the tile, flight, reason, previous attempts, OS user and host.\n" +
			"A tile that is not given up is refused (exit 1, naming it) and nothing changes.\n" +
			"--all-given-up asks for confirmation on a terminal and needs --yes otherwise.\n" +
			"Nothing in tilectl ever requeues on its own.",
		Args: cobra.NoArgs,
		// The flags are checked before anything runs (and the help
		// examples are checked against the same rules).
		PreRunE: func(*cobra.Command, []string) error { return opts.validate() },
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.StdinTTY = f.IOStreams.IsStdinTTY()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return RequeueRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.FlightID, "flight", "", "the flight (required)")
	fl.StringSliceVar(&opts.TileIDs, "tile", nil, "a given-up tile to requeue (repeatable)")
	fl.BoolVar(&opts.AllGivenUp, "all-given-up", false, "requeue every given-up tile of the flight")
	fl.StringVar(&opts.Reason, "reason", "", "why the tiles may be sent again (required; recorded)")
	fl.BoolVar(&opts.Yes, "yes", false, "do not ask for confirmation (--all-given-up off a terminal needs it)")
	return cmd
}

// validate checks the flags; its errors are usage errors.
func (opts *RequeueOptions) validate() error {
	if err := tilestore.ValidateFlightID(opts.FlightID); err != nil {
		return exitcode.UsageError(fmt.Errorf("--flight: %w", err))
	}
	if (len(opts.TileIDs) > 0) == opts.AllGivenUp {
		return exitcode.UsageError(errors.New("give either --tile ID (repeatable) or --all-given-up"))
	}
	if strings.TrimSpace(opts.Reason) == "" {
		return exitcode.UsageError(errors.New("--reason is required: say why the tiles may be sent again (it is kept in the flight data recorder)"))
	}
	return nil
}

// RequeueRun requeues and records.
func RequeueRun(ctx context.Context, opts *RequeueOptions) error {
	cfg, err := opts.Config()
	if err != nil {
		return err
	}
	store, err := opts.Store(ctx)
	if err != nil {
		return err
	}
	if opts.AllGivenUp && !opts.Yes {
		gs, err := store.GiveUps(ctx, opts.FlightID, 0)
		if err != nil {
			return err
		}
		if len(gs) == 0 {
			fmt.Fprintf(opts.IO.Out, "flight %s has no given-up tiles; nothing to requeue\n", opts.FlightID)
			return nil
		}
		if !opts.StdinTTY {
			return exitcode.UsageError(fmt.Errorf("--all-given-up would requeue %s of flight %s: pass --yes to confirm (no terminal to ask on)", iostreams.Count(len(gs), "tile", "tiles"), opts.FlightID))
		}
		if !opts.IO.Confirm(fmt.Sprintf("requeue %s of flight %s (reason: %s)? type yes: ",
			iostreams.Count(len(gs), "given-up tile", "given-up tiles"), opts.FlightID, opts.Reason), "yes") {
			return exitcode.New(exitcode.Failure, errors.New("not confirmed; nothing was requeued"))
		}
	}
	rec, err := fdr.Open(ctx, cfg.FDRPath, fdr.Options{Capacity: cfg.FDRCapacityBytes})
	if err != nil {
		return fmt.Errorf("open the flight data recorder %s: %w", cfg.FDRPath, err)
	}
	defer rec.Close()
	who, host := whoami.User(), whoami.Host()
	rs, err := store.Requeue(ctx, opts.FlightID, opts.TileIDs, opts.AllGivenUp, func(ctx context.Context, rs []tilestore.Requeued) error {
		for _, r := range rs {
			if _, err := rec.Append(ctx, fdr.Entry{Kind: RequeueKind, Durable: true,
				Key: fmt.Sprintf("requeue/%s/%d", r.TileID, r.Requeues),
				Payload: RequeuePayload{TileID: r.TileID, FlightID: r.FlightID, Reason: opts.Reason,
					PreviousAttempts: r.PreviousAttempts, Requeue: r.Requeues, User: who, Host: host, RequeuedAt: r.RequeuedAt},
			}); err != nil {
				return fmt.Errorf("record the requeue of tile %s: %w", r.TileID, err)
			}
		}
		return nil
	})
	var ng *tilestore.NotGivenUpError
	if errors.As(err, &ng) {
		return exitcode.New(exitcode.Failure, ng)
	}
	if err != nil {
		return err
	}
	for _, r := range rs {
		fmt.Fprintf(opts.IO.ErrOut, "requeued: tile %s of flight %s (%s spent; a fresh budget of %d) by %s on %s: %s\n",
			r.TileID, r.FlightID, iostreams.Count(r.PreviousAttempts, "attempt", "attempts"), cfg.Retry.MaxPerTileAttempts, who, host, opts.Reason)
	}
	fmt.Fprintf(opts.IO.Out, "requeued %s of flight %s; run 'tilectl upload-pending --flight %s' to send them\n",
		iostreams.Count(len(rs), "tile", "tiles"), opts.FlightID, opts.FlightID)
	return nil
}
