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
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/tilestore"
)

// Options are upload-pending's dependencies, then its flags.
type Options struct {
	IO     *iostreams.IOStreams
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

	FlightID           string
	NoRetry            bool
	DryRun             bool
	StrictDeadline     bool
	Concurrency        string
	BatchSize          int
	MaxInCallRetries   int
	MaxPerTileAttempts int
	BackoffBase        time.Duration
	BackoffCap         time.Duration
	Deadline           time.Duration
	Lease              time.Duration
	MetricsFile        string
	ClientID           string
	Order              string
	InsecureSkipVerify bool
	Output             string
	BWLimit            string
	ProgressInterval   time.Duration
	// Quiet shows only errors and the summary: no progress, no INFO/WARN.
	Quiet      bool
	CPUProfile string // hidden --cpuprofile: where to write a CPU profile
	// Changed reports whether the user set a flag; only those override the
	// configuration. Nil means none did.
	Changed func(flag string) bool
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
			opts.Changed = cmd.Flags().Changed
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
	fl.StringVar(&opts.Concurrency, "concurrency", "", "batches in flight at once: auto (measured from the link) or 1..256 (default from config upload.concurrency)")
	fl.IntVar(&opts.BatchSize, "batch-size", 0, "tiles per batch, 0 = provider's max (default from config upload.batch_size)")
	fl.IntVar(&opts.MaxInCallRetries, "max-in-call-retries", 0, "retries of a partial upload within this run (default from config retry.max_in_call_retries)")
	fl.IntVar(&opts.MaxPerTileAttempts, "max-per-tile-attempts", 0, "rejections before a tile is given up (default from config retry.max_per_tile_attempts)")
	fl.DurationVar(&opts.BackoffBase, "backoff-base", 0, "first wait between retries (default from config retry.backoff_base)")
	fl.DurationVar(&opts.BackoffCap, "backoff-cap", 0, "longest wait between retries (default from config retry.backoff_cap)")
	fl.DurationVar(&opts.Deadline, "deadline", 0, "bound on the whole run (default from config upload.deadline)")
	fl.DurationVar(&opts.Lease, "lease", 0, "how long this run's open batches stay its own after it last renewed them (default from config upload.lease)")
	fl.StringVar(&opts.MetricsFile, "metrics-file", "", "write Prometheus text-format metrics to this file at the end (default from config upload.metrics_file)")
	fl.StringVar(&opts.ClientID, "client-id", "", "strict client sequencing: send Client-Id and a journaled Client-Sequence with every batch, one batch in flight (default from config upload.client_id)")
	fl.StringVar(&opts.Order, "order", "", "the order tiles are sent in: zoom (lowest zoom first, then by tile ID) or id (default from config upload.order)")
	fl.BoolVar(&opts.InsecureSkipVerify, "insecure-skip-verify", false, "skip TLS certificate checks (testing only)")
	fl.StringVar(&opts.BWLimit, "bwlimit", "", "cap on the bytes per second this process sends: 512k, 10M, off, or a timetable such as \"08:00,512k 18:00,10M 23:00,off\"; SIGUSR2 toggles it (default from config upload.bwlimit)")
	fl.DurationVar(&opts.ProgressInterval, "progress-interval", 0, "how often the progress line is logged when stderr is not a terminal (default from config upload.progress_interval)")
	fl.StringVarP(&opts.Output, "output", "o", "text", "output format: text or json")
	fl.BoolVarP(&opts.Quiet, "quiet", "q", false, "show only errors and the summary (no progress, no info or warning logs)")
	fl.StringVar(&opts.CPUProfile, "cpuprofile", "", "write a pprof CPU profile of the run to this file (or set "+cpuProfileEnv+")")
	_ = fl.MarkHidden("cpuprofile")
	for _, f := range configFlags {
		_ = fl.SetAnnotation(f.flag, factory.ConfigKeyAnnotation, []string{f.key})
	}
	return cmd
}

func (o *Options) changed(flag string) bool { return o.Changed != nil && o.Changed(flag) }

// validateFlags checks the flags that set no configuration field; those
// that do are checked by config.Validate in settings, like every other
// source of the same value.
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

// configFlags are the flags that set a configuration field: the key they
// set and the flag's value in the field's string form.
var configFlags = []struct {
	flag, key string
	value     func(o *Options) string
}{
	{"concurrency", "upload.concurrency", func(o *Options) string { return o.Concurrency }},
	{"batch-size", "upload.batch_size", func(o *Options) string { return strconv.Itoa(o.BatchSize) }},
	{"deadline", "upload.deadline", func(o *Options) string { return o.Deadline.String() }},
	{"lease", "upload.lease", func(o *Options) string { return o.Lease.String() }},
	{"insecure-skip-verify", "upload.insecure_skip_verify", func(o *Options) string { return strconv.FormatBool(o.InsecureSkipVerify) }},
	{"max-in-call-retries", "retry.max_in_call_retries", func(o *Options) string { return strconv.Itoa(o.MaxInCallRetries) }},
	{"max-per-tile-attempts", "retry.max_per_tile_attempts", func(o *Options) string { return strconv.Itoa(o.MaxPerTileAttempts) }},
	{"backoff-base", "retry.backoff_base", func(o *Options) string { return o.BackoffBase.String() }},
	{"backoff-cap", "retry.backoff_cap", func(o *Options) string { return o.BackoffCap.String() }},
	{"metrics-file", "upload.metrics_file", func(o *Options) string { return o.MetricsFile }},
	{"client-id", "upload.client_id", func(o *Options) string { return o.ClientID }},
	{"order", "upload.order", func(o *Options) string { return o.Order }},
	{"bwlimit", "upload.bwlimit", func(o *Options) string { return o.BWLimit }},
	{"progress-interval", "upload.progress_interval", func(o *Options) string { return o.ProgressInterval.String() }},
}

// settings is the configuration with the user's flags applied (from the
// command line the factory has already applied them, through
// factory.ConfigKeyAnnotation; callers that build Options directly rely on
// this overlay), validated
// by config.Validate exactly as a file or environment value is; an error
// names the flag (exit 2 at the caller).
func (o *Options) settings(c *config.Config) (config.Config, retrydecorator.Config, error) {
	cfg := *c
	var errs []error
	for _, f := range configFlags {
		if o.changed(f.flag) {
			if err := cfg.SetFrom(config.Source{Kind: config.SourceFlag, Name: "--" + f.flag}, f.key, f.value(o)); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", f.flag, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, retrydecorator.Config{}, err
	}
	cfg.Complete() // again: a flag may have set upload.client_id
	if err := cfg.Validate(); err != nil {
		return cfg, retrydecorator.Config{}, fmt.Errorf("invalid configuration:\n%w", err)
	}
	rc := retrydecorator.Config{
		MaxInCallRetries:   cfg.Retry.MaxInCallRetries,
		MaxPerTileAttempts: cfg.Retry.MaxPerTileAttempts,
		BackoffBase:        cfg.Retry.BackoffBase,
		BackoffCap:         cfg.Retry.BackoffCap,
		Jitter:             operation.JitterKind(cfg.Retry.Jitter),
	}
	if err := rc.Validate(); err != nil {
		return cfg, rc, err
	}
	return cfg, rc, nil
}
