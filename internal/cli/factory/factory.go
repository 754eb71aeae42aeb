// Package factory wires the dependencies commands share, by hand: streams,
// configuration, logger, the tile store, the clock and the build version.
// Everything expensive is created on first use and at most once, so a
// command that never touches the database never connects to it, and
// Close releases whatever was opened.
package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/migrations"
	"github.com/tilectl/tilectl/tilestore"
)

// ConfigKeyAnnotation marks a command's flag that sets a configuration
// field (the annotation's one value is the key, e.g. "upload.concurrency"):
// ApplyConfigFlags, which the root command's ApplyFlags calls, sets it
// before the configuration is validated, so a flag overrides the file and
// the environment before any of them is checked. It is the one place such
// a flag takes effect: the command reads the value from the configuration.
const ConfigKeyAnnotation = "tilectl_config_key"

// ApplyConfigFlags sets in c the field of each flag in flags that the user
// set and that carries ConfigKeyAnnotation, recording the flag as the
// value's source ("flag --concurrency"); an error names the flag.
func ApplyConfigFlags(c *config.Config, flags *pflag.FlagSet) error {
	var errs []error
	flags.Visit(func(fl *pflag.Flag) {
		if keys := fl.Annotations[ConfigKeyAnnotation]; len(keys) == 1 {
			if err := c.SetFrom(config.Source{Kind: config.SourceFlag, Name: "--" + fl.Name}, keys[0], fl.Value.String()); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", fl.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// Factory is what every command constructor receives.
type Factory struct {
	IOStreams *iostreams.IOStreams
	// Config loads, completes and validates the configuration once. Its
	// errors are usage errors (exit 2).
	Config func() (*config.Config, error)
	// Logger writes to stderr: console format on a terminal, JSON otherwise
	// (config log_format overrides), at the configured level.
	Logger func() zerolog.Logger
	// Store opens the tile store once; Close closes it.
	Store func(ctx context.Context) (*tilestore.Store, error)
	// Now is the clock.
	Now func() time.Time
	// Version and Commit describe the build ("dev" and "" when unknown).
	Version string
	Commit  string

	// ConfigPath is --config; set by the root command before any command
	// runs. "" means $TILECTL_CONFIG or no file.
	ConfigPath string
	// Load reads the configuration before the flags: config.Load of
	// ConfigPath and LookupEnv unless a test sets it before the first
	// Config call (to a configuration it builds in code). Config applies
	// the flags to what Load returns, completes and validates it.
	Load func() (*config.Config, error)
	// ApplyFlags overlays the command-line flags the user set; set by the
	// root command.
	ApplyFlags func(*config.Config) error
	// LookupEnv reads the environment (os.LookupEnv unless a test sets it
	// before the first Config call).
	LookupEnv config.LookupEnv
	// Environ lists the environment (os.Environ in production): the first
	// Config call warns on stderr about each TILECTL_ variable tilectl does
	// not read, a misspelling that would otherwise be ignored in silence.
	// Nil checks nothing.
	Environ func() []string

	mu      sync.Mutex
	closers []func()
}

// New wires a Factory on the process's streams, environment and clock.
func New(version, commit string) *Factory {
	f := NewWith(iostreams.System(), os.LookupEnv, version, commit)
	f.Environ = os.Environ
	return f
}

// NewWith wires a Factory on the given streams and environment: what tests
// use with iostreams.Test() and a map of TILECTL_* variables.
func NewWith(ios *iostreams.IOStreams, env config.LookupEnv, version, commit string) *Factory {
	f := &Factory{
		IOStreams: ios,
		Now:       time.Now,
		Version:   version,
		Commit:    commit,
		LookupEnv: env,
	}
	f.Config = sync.OnceValues(f.loadConfig)
	f.Logger = sync.OnceValue(f.newLogger)
	f.Store = f.storeOnce()
	return f
}

func (f *Factory) loadConfig() (*config.Config, error) {
	if f.Environ != nil {
		for _, u := range config.UnknownEnv(f.Environ()) {
			fmt.Fprintf(f.IOStreams.ErrOut, "tilectl: warning: %s\n", u)
		}
	}
	load := f.Load
	if load == nil {
		load = func() (*config.Config, error) { return config.Load(f.ConfigPath, f.LookupEnv) }
	}
	c, err := load()
	if err != nil {
		return nil, exitcode.UsageError(err)
	}
	if f.ApplyFlags != nil {
		if err := f.ApplyFlags(c); err != nil {
			return nil, exitcode.UsageError(err)
		}
	}
	c.Complete()
	if err := c.Validate(); err != nil {
		return nil, exitcode.UsageError(fmt.Errorf("invalid configuration:\n%w", err))
	}
	return c, nil
}

// Durations in logs carry their unit ("30m0s", "2.5s"), in the console and
// in JSON alike: a bare 1800000 reads as anything.
func init() { zerolog.DurationFieldFormat = zerolog.DurationFormatString }

func (f *Factory) newLogger() zerolog.Logger {
	level, format := zerolog.InfoLevel, "auto"
	if c, err := f.Config(); err == nil {
		if l, perr := zerolog.ParseLevel(c.LogLevel); perr == nil {
			level = l
		}
		format = c.LogFormat
	}
	w := f.IOStreams.LogWriter()
	if format == "console" || (format == "auto" && f.IOStreams.IsStderrTTY()) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

func (f *Factory) storeOnce() func(ctx context.Context) (*tilestore.Store, error) {
	var (
		mu    sync.Mutex
		store *tilestore.Store
	)
	// Not sync.OnceValues: a failed open (database still starting) may be
	// retried by a later call with a fresh context.
	return func(ctx context.Context) (*tilestore.Store, error) {
		mu.Lock()
		defer mu.Unlock()
		if store != nil {
			return store, nil
		}
		c, err := f.Config()
		if err != nil {
			return nil, err
		}
		s, err := tilestore.Open(ctx, c.DatabaseURL)
		if err != nil {
			var ce *tilestore.ConnectError
			if errors.As(err, &ce) {
				ce.URLFrom = c.Origin("database_url")
			}
			return nil, err
		}
		if err := migrations.CheckSchema(ctx, s.Pool()); err != nil {
			s.Close()
			return nil, err
		}
		store = s
		f.OnClose(s.Close)
		return s, nil
	}
}

// OnClose registers fn to run at Close, in reverse order of registration.
func (f *Factory) OnClose(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closers = append(f.closers, fn)
}

// Close releases everything opened through the factory.
func (f *Factory) Close() {
	f.mu.Lock()
	closers := f.closers
	f.closers = nil
	f.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}
