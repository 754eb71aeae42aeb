// Package upload is the `tilectl upload-pending` command: it uploads every
// pending tile of one flight (or of every landed flight) through the HTTP
// uploader wrapped in the idempotent retry decorator.
//
// It promises: any number of runs, on one machine or many, share a flight
// (each claims its own batches under a lease, see tilestore.ClaimBatch;
// no run is refused because another holds the flight); data (the
// summary) on stdout and diagnostics on stderr; `-o json` prints one stable
// JSON object (see Summary); the provider token never appears in any output,
// metrics file or flight-data record; --dry-run sends and changes nothing.
package upload

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/gcfloor"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/tilestore"
)

// gcFloor is how much upload-pending's heap may grow between garbage
// collections (gcfloor.Keep): a few batches' worth of garbage. gcfloor
// caps the percent (a heap that small grows by at most four times what
// is live); a heap of gcFloor or more grows by Go's default.
const gcFloor = 32 << 20

// Options are upload-pending's dependencies, then its flags.
type Options struct {
	IO *iostreams.IOStreams
	// Config is the configuration with the flags applied, completed and
	// validated: factory.Factory.Config.
	Config func() (*config.Config, error)
	Logger func() zerolog.Logger
	Store  func(ctx context.Context) (*tilestore.Store, error)
	Clock  retrydecorator.Clock
	// HTTPClient, if set, is the uploader's client (tests). Default: the
	// uploader's own pooled client.
	HTTPClient *http.Client
	// OpenFDR opens the flight data recorder for give-up records. Default:
	// fdr.Open on config fdr_path with fdr_capacity_bytes.
	OpenFDR func(ctx context.Context, path string, capacity int64) (GiveUpRecorder, error)
	// NewTicker paces progress log lines when stderr is not a terminal.
	// Default: a time.Ticker.
	NewTicker func(d time.Duration) (c <-chan time.Time, stop func())
	Version   string
	// RunID names this run in its batch claims and the run history
	// (upload_runs.run_id). Default: a fresh ID (tilestore.NewRun).
	RunID string

	// The flags that set no configuration field. Those that do (configFlags)
	// hold no field here: the factory applies them to the configuration
	// (factory.ConfigKeyAnnotation), where the run reads them.
	FlightID       string
	NoRetry        bool
	DryRun         bool
	StrictDeadline bool
	Output         string
	// Quiet shows only errors and the summary: no progress, no INFO/WARN.
	Quiet      bool
	CPUProfile string // hidden --cpuprofile: where to write a CPU profile
}

// NewCmdUploadPending builds the command. runF, if not nil, replaces
// uploadRun (tests of flag parsing).
func NewCmdUploadPending(f *factory.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{
		IO:      f.IOStreams,
		Config:  f.Config,
		Logger:  f.Logger,
		Store:   f.Store,
		Clock:   retrydecorator.SystemClock{},
		Version: f.Version,
	}
	cmd := &cobra.Command{
		Use:   "upload-pending",
		Short: "Upload pending tiles of landed flights to the satellite provider",
		Long: "Upload every pending tile of a flight (or, without --flight, of every on_ground\n" +
			"flight with pending tiles, one after another). Partial batches are retried with\n" +
			"exponential backoff; a tile rejected too often is given up for human review.\n\n" +
			"Exit codes: 0 all uploaded; 3 tiles still pending or given up; 4 flight not\n" +
			"on_ground; 2 usage or configuration; 1 other;\n" +
			"130 SIGINT (Ctrl-C), 143 SIGTERM: batches on the wire were answered and settled\n" +
			"first, the rest stays pending for the next run (a second signal exits at once).\n" +
			"Any number of runs may share a flight: each claims its own batches, under a\n" +
			"lease (--lease) it renews while it works; a run that died leaves its batches\n" +
			"to the next run once the lease ends.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validateFlags(); err != nil {
				return exitcode.UsageError(err)
			}
			stopProfile, err := startCPUProfile(opts.CPUProfile, os.Getenv)
			if err != nil {
				return exitcode.UsageError(err)
			}
			run := uploadRun
			if runF != nil {
				run = runF
			} else {
				// A run's garbage is per batch (rows, body, answer)
				// while what stays live is small with small tiles,
				// which Go would collect every 4 MiB (its least heap).
				defer gcfloor.Keep(gcFloor, os.Getenv)()
			}
			err = run(cmd.Context(), opts)
			if perr := stopProfile(); perr != nil && err == nil {
				err = perr
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.FlightID, "flight", "", "upload only this flight (default: every on_ground flight with pending tiles)")
	fl.BoolVar(&opts.NoRetry, "no-retry", false, "run the bare uploader without the retry decorator (diagnostics)")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "show what would be sent; send and change nothing")
	fl.BoolVar(&opts.StrictDeadline, "strict-deadline", false, "refuse to start (exit 2) when the retries' worst case exceeds the deadline minus a 5% margin")
	fl.String("concurrency", "", "batches in flight at once: auto (measured from the link) or 1..256 (default from config upload.concurrency)")
	fl.Int("batch-size", 0, "tiles per batch, 0 = provider's max (default from config upload.batch_size)")
	fl.Int("max-in-call-retries", 0, "retries of a partial upload within this run (default from config retry.max_in_call_retries)")
	fl.Int("max-per-tile-attempts", 0, "rejections before a tile is given up (default from config retry.max_per_tile_attempts)")
	fl.Duration("backoff-base", 0, "first wait between retries (default from config retry.backoff_base)")
	fl.Duration("backoff-cap", 0, "longest wait between retries (default from config retry.backoff_cap)")
	fl.Duration("deadline", 0, "bound on the whole run (default from config upload.deadline)")
	fl.Duration("lease", 0, "how long this run's open batches stay its own after it last renewed them (default from config upload.lease)")
	fl.String("metrics-file", "", "write Prometheus text-format metrics to this file at the end (default from config upload.metrics_file)")
	fl.String("client-id", "", "strict client sequencing: send Client-Id and a journaled Client-Sequence with every batch, one batch in flight (default from config upload.client_id)")
	fl.String("order", "", "the order tiles are sent in: zoom (lowest zoom first, then by tile ID) or id (default from config upload.order)")
	fl.Bool("insecure-skip-verify", false, "skip TLS certificate checks (testing only)")
	fl.String("bwlimit", "", "cap on the bytes per second this process sends: 512k, 10M, off, or a timetable such as \"08:00,512k 18:00,10M 23:00,off\"; SIGUSR2 toggles it (default from config upload.bwlimit)")
	fl.Duration("progress-interval", 0, "how often the progress line is logged when stderr is not a terminal (default from config upload.progress_interval)")
	fl.StringVarP(&opts.Output, "output", "o", "text", "output format: text or json")
	fl.BoolVarP(&opts.Quiet, "quiet", "q", false, "show only errors and the summary (no progress, no info or warning logs)")
	fl.StringVar(&opts.CPUProfile, "cpuprofile", "", "write a pprof CPU profile of the run to this file (or set "+cpuProfileEnv+")")
	_ = fl.MarkHidden("cpuprofile")
	for flag, key := range configFlags {
		_ = fl.SetAnnotation(flag, factory.ConfigKeyAnnotation, []string{key})
	}
	return cmd
}

// validateFlags checks the flags that set no configuration field; those
// that do are checked by config.Validate when the factory loads the
// configuration, like every other source of the same value.
func (o *Options) validateFlags() error {
	var errs []error
	if o.Output != "text" && o.Output != "json" {
		errs = append(errs, fmt.Errorf("--output must be text or json, got %q", o.Output))
	}
	if o.FlightID != "" {
		if err := tilestore.ValidateFlightID(o.FlightID); err != nil {
			errs = append(errs, fmt.Errorf("--flight: %w", err))
		}
	}
	return errors.Join(errs...)
}

// configFlags are the flags that set a configuration field, by the key
// they set.
var configFlags = map[string]string{
	"concurrency":           "upload.concurrency",
	"batch-size":            "upload.batch_size",
	"deadline":              "upload.deadline",
	"lease":                 "upload.lease",
	"insecure-skip-verify":  "upload.insecure_skip_verify",
	"max-in-call-retries":   "retry.max_in_call_retries",
	"max-per-tile-attempts": "retry.max_per_tile_attempts",
	"backoff-base":          "retry.backoff_base",
	"backoff-cap":           "retry.backoff_cap",
	"metrics-file":          "upload.metrics_file",
	"client-id":             "upload.client_id",
	"order":                 "upload.order",
	"bwlimit":               "upload.bwlimit",
	"progress-interval":     "upload.progress_interval",
}

// retryConfig is the retry decorator's part of the configuration (which
// the factory has validated, flags included).
func retryConfig(c *config.Config) retrydecorator.Config {
	return retrydecorator.Config{
		MaxInCallRetries:   c.Retry.MaxInCallRetries,
		MaxPerTileAttempts: c.Retry.MaxPerTileAttempts,
		BackoffBase:        c.Retry.BackoffBase,
		BackoffCap:         c.Retry.BackoffCap,
		Jitter:             operation.JitterKind(c.Retry.Jitter),
	}
}
