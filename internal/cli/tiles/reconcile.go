package tiles

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
)

// ReconcileKind is the flight-data record kind of tiles a reconcile moved
// back to pending because the provider lacks them or holds other bytes.
const ReconcileKind = "upload.reconcile"

// ReconcileOptions are `tiles reconcile`'s inputs.
type ReconcileOptions struct {
	IO     *iostreams.IOStreams
	Config func() (*config.Config, error)
	Logger func() zerolog.Logger
	Store  func(ctx context.Context) (*tilestore.Store, error)
	Now    func() time.Time
	// Sleep waits before unclear lookups are asked again. Default:
	// operation.Sleep, on the real clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// HTTPClient, if set, is the lookup client's (tests). Default: the
	// uploader's own, with the configured TLS settings.
	HTTPClient *http.Client
	// NewTicker paces progress when stderr is not a terminal (a log line
	// each tick) and redraws the status line on one. Default: a time.Ticker.
	NewTicker func(d time.Duration) (c <-chan time.Time, stop func())
	Version   string

	FlightID string
	Requeue  bool
	Restart  bool
	Output   string
}

// NewCmdReconcile is `tiles reconcile --flight F [--requeue] [--restart] [-o text|json]`.
func NewCmdReconcile(f *factory.Factory, runF func(context.Context, *ReconcileOptions) error) *cobra.Command {
	opts := &ReconcileOptions{IO: f.IOStreams, Config: f.Config, Logger: f.Logger, Store: f.Store, Now: f.Now, Version: f.Version}
	cmd := &cobra.Command{
		Use:   "reconcile --flight F [--requeue] [--restart] [-o text|json]",
		Short: "Ask the provider about every uploaded tile and list what it lacks or holds with other bytes",
		Long: "Ask the provider (its tile lookup) about every tile of the flight that the tile store\n" +
			"records as uploaded, and compare its sha256 and size with ours. Lists each tile the\n" +
			"provider lacks (lacks), holds with other bytes (holds_other), or gave no clear answer\n" +
			"about after resends (unclear: never counted as lacking).\n\n" +
			"Lookups run " + fmt.Sprint(reconcileStartLookups) + " at a time at first, up to " + fmt.Sprint(reconcileMaxLookups) +
			" while the provider answers without resends,\n" +
			"halving when it asks to wait (429, 503) or times out. Progress is kept page by page in\n" +
			"<cache_dir>/reconcile/: a pass interrupted (Ctrl-C, a crash) resumes where it stopped;\n" +
			"--restart starts over. A pass that completes removes its checkpoint.\n\n" +
			"--requeue moves the tiles the provider lacks or holds with other bytes back to pending,\n" +
			"with a flight-data record (kind " + ReconcileKind + "): the next upload-pending sends\n" +
			"them again, in new batches under new keys.\n\n" +
			"Exit codes: 0 the provider holds exactly what the tile store says; 3 it does not, or\n" +
			"some tiles could not be checked; 2 usage or configuration; 1 other; 130/143 interrupted.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := tilestore.ValidateFlightID(opts.FlightID); err != nil {
				return exitcode.UsageError(fmt.Errorf("--flight: %w", err))
			}
			if err := iostreams.CheckOutput(opts.Output); err != nil {
				return exitcode.UsageError(err)
			}
			if opts.Output != iostreams.OutputJSON {
				opts.Output = iostreams.OutputText
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return ReconcileRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.FlightID, "flight", "", "the flight (required)")
	fl.BoolVar(&opts.Requeue, "requeue", false, "move the tiles the provider lacks or holds with other bytes back to pending (recorded)")
	fl.BoolVar(&opts.Restart, "restart", false, "drop an interrupted pass's checkpoint and check every uploaded tile again")
	iostreams.AddOutputFlag(cmd, &opts.Output)
	return cmd
}

// ReconcileRun checks the flight against the provider. With -o json it
// prints exactly one object whatever ends it.
func ReconcileRun(ctx context.Context, opts *ReconcileOptions) error {
	r := &reconciler{opts: opts, sum: ReconcileSummary{FlightID: opts.FlightID, Tiles: []ReconcileFinding{}}}
	err := r.run(ctx)
	if se := exitcode.Interruption(ctx); se != nil {
		r.sum.Outcome = "interrupted"
		err = exitcode.New(se.Code(), fmt.Errorf("reconcile of flight %s interrupted (%s) after %d of %s; run it again to resume",
			opts.FlightID, se, r.sum.Checked, iostreams.Count(r.sum.Total, "uploaded tile", "uploaded tiles")))
	}
	return r.finish(err)
}

// errNotReconciled is wrapped in the exit-3 error of a pass that found the
// provider holding other than the tile store says, or could not tell.
var errNotReconciled = errors.New("the provider does not hold exactly what the tile store records as uploaded")

func (r *reconciler) finish(err error) error {
	s := &r.sum
	s.Elapsed = r.elapsed().Seconds()
	if s.Elapsed > 0 {
		s.TilesPerSecond = float64(s.Checked-s.ResumedChecked) / s.Elapsed
	}
	if err == nil && (s.Lacks+s.HoldsOther+s.Unclear) > 0 {
		err = exitcode.New(exitcode.Partial, fmt.Errorf("%w: flight %s: %s, %s, %s",
			errNotReconciled, s.FlightID, iostreams.Count(s.Lacks, "tile lacking", "tiles lacking"),
			iostreams.Count(s.HoldsOther, "with other bytes", "with other bytes"), iostreams.Count(s.Unclear, "unclear", "unclear")))
	}
	switch {
	case s.Outcome != "":
	case err == nil:
		s.Outcome = "held"
	case errors.Is(err, errNotReconciled):
		s.Outcome = "differs"
	default:
		s.Outcome = "failure"
	}
	s.ExitCode = exitcode.Code(err)
	if err != nil && !errors.Is(err, errNotReconciled) {
		msg := err.Error()
		s.Error = &msg
	}
	if werr := r.write(); werr != nil && err == nil {
		err = werr
	}
	if errors.Is(err, errNotReconciled) {
		return exitcode.New(exitcode.Partial, nil) // the summary says it all
	}
	return err
}
