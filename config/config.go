// Package config is tilectl's one configuration struct and the rules that
// fill it: built-in defaults, then a YAML file (--config or TILECTL_CONFIG),
// then TILECTL_* environment variables, then command-line flags (applied by
// the command layer, only for flags the user set).
//
// It promises: every field has a documented default; an unknown YAML key or
// a malformed value is an error that names the file, the key and the line;
// Validate names the bad field, its value and what is allowed; and the
// provider token is never printed, logged or echoed in an error.
package config

import (
	"os"
	"path/filepath"
	"time"
)

// Config is the whole of tilectl's configuration. The yaml tag is the key in
// the config file; the environment variable is TILECTL_ followed by the
// upper-cased key path joined by "_" (upload.concurrency ->
// TILECTL_UPLOAD_CONCURRENCY). See EnvVars for the full list.
type Config struct {
	// DatabaseURL is the PostgreSQL URL holding tile metadata.
	// Default: postgres://postgres@127.0.0.1:5432/tilectl?sslmode=disable.
	DatabaseURL string `yaml:"database_url"`
	// CacheDir holds the tile blobs (the blob cache). Default:
	// $XDG_CACHE_HOME/tilectl, or ~/.cache/tilectl when XDG_CACHE_HOME is unset.
	CacheDir string `yaml:"cache_dir"`
	// ProviderURL is the satellite provider's base URL.
	// Default: http://127.0.0.1:8765.
	ProviderURL string `yaml:"provider_url"`
	// ProviderToken is the bearer token sent to the provider. Default: unset.
	// It is redacted in every printed, logged or marshalled form.
	ProviderToken Secret `yaml:"provider_token"`
	// ProviderCAFile is a PEM bundle of CA certificates trusted for the
	// provider's TLS certificate in addition to the system roots (a
	// provider behind a private CA). Default: unset (system roots only).
	ProviderCAFile string `yaml:"provider_ca_file"`
	// ProviderClientCert is a PEM certificate (chain) presented to a
	// provider that asks for a client certificate (mutual TLS); set with
	// ProviderClientKey. Default: unset.
	ProviderClientCert string `yaml:"provider_client_cert"`
	// ProviderClientKey is the PEM private key of ProviderClientCert. Its
	// path is shown (config view), never its contents. Default: unset.
	ProviderClientKey string `yaml:"provider_client_key"`
	// FDRPath is the flight data recorder's ring file.
	// Default: <CacheDir>/fdr.ring (filled in by Complete).
	FDRPath string `yaml:"fdr_path"`
	// FDRCapacityBytes is the ring file's size. Default: 4194304 (4 MiB).
	FDRCapacityBytes int64 `yaml:"fdr_capacity_bytes"`
	// LogLevel is one of trace, debug, info, warn, error. Default: info.
	LogLevel string `yaml:"log_level"`
	// LogFormat is auto (console on a terminal, JSON otherwise), console or
	// json. Default: auto.
	LogFormat string `yaml:"log_format"`
	// Upload tunes upload-pending.
	Upload Upload `yaml:"upload"`
	// Retry tunes the idempotent retry decorator.
	Retry Retry `yaml:"retry"`
	// Cache governs the blob cache's disk space.
	Cache Cache `yaml:"cache"`

	file    string            // the config file read, "" for none
	sources map[string]Source // key path -> where it was set; absent: default
	tls     *builtTLS         // what Validate built from the TLS files (ProviderTLS)
}

// Upload tunes the HTTP uploader.
type Upload struct {
	// Concurrency is how many batches are in flight at once: auto (the
	// uploader decides from the round trips and throttling it measures,
	// 1..256) or a fixed 1..256. Default: auto, or 1 when ClientID is set
	// (strict sequencing allows one batch in flight; Complete fills it in).
	Concurrency Concurrency `yaml:"concurrency"`
	// BatchSize caps tiles per batch; 0 means the provider's max_batch_tiles.
	// Default: 0.
	BatchSize int `yaml:"batch_size"`
	// Deadline bounds a whole upload-pending run. Default: 30m.
	Deadline time.Duration `yaml:"deadline"`
	// InsecureSkipVerify disables TLS certificate checks (testing only).
	// Default: false.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// DisableRetryDecorator runs the bare uploader, without the idempotent
	// retry decorator (diagnostics only). Default: false.
	DisableRetryDecorator bool `yaml:"disable_retry_decorator"`
	// RequestTimeout bounds one HTTP request. Default: 60s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// FirstContactTimeout bounds a run's first contact with the provider
	// (GET /v1/capabilities, its resends included) until the provider has
	// answered once: a URL where nothing answers (a stuck modem, a captive
	// portal that accepts connections and never replies) fails within it,
	// naming the URL. Once the provider has answered, RequestTimeout and
	// the full resends apply. Default: 8s.
	FirstContactTimeout time.Duration `yaml:"first_contact_timeout"`
	// Lease is how long a batch stays this run's after the run last renewed
	// it; another run settles it only after that (a run that died). Renewed
	// every third of it. Default: 30s.
	Lease time.Duration `yaml:"lease"`
	// MetricsFile, when set, is where upload-pending writes its Prometheus
	// text-format metrics at the end of a run (for node_exporter's textfile
	// collector: a *.prom file in its directory). Default: unset.
	MetricsFile string `yaml:"metrics_file"`
	// BreakerFailures is how many failures in a row (no answer, or a 5xx)
	// open the circuit breaker shared by a run's workers (0..1000; 0 turns
	// it off). Default: 5.
	BreakerFailures int `yaml:"breaker_failures"`
	// BreakerCooldown is how long an open breaker lets nothing through
	// before one probe; it doubles after each failed probe. Default: 5s.
	BreakerCooldown time.Duration `yaml:"breaker_cooldown"`
	// BreakerMaxCooldown caps the doubling cool-down. Default: 60s.
	BreakerMaxCooldown time.Duration `yaml:"breaker_max_cooldown"`
	// OutageLimit ends a run whose provider has been unavailable (breaker
	// open) this long; 0 waits until upload.deadline. Default: 0.
	OutageLimit time.Duration `yaml:"outage_limit"`
	// ResendBudget is the retry budget's initial tokens: resends across a
	// run are at most ResendBudget + ResendBudgetPercent% of first attempts
	// (0..100000). Default: 10.
	ResendBudget int `yaml:"resend_budget"`
	// ResendBudgetPercent is the share of first attempts added to the
	// budget, in percent (0..100). Default: 20.
	ResendBudgetPercent int `yaml:"resend_budget_percent"`
	// ClientID, when set, turns on strict client sequencing
	// (docs/provider-api.md): every batch carries Client-Id with this value and
	// a Client-Sequence journaled in the database, one batch in flight at a
	// time. 1..128 characters of letters, digits, '.', '_', ':' and '-'.
	// The provider must offer sequencing. Default: unset.
	ClientID string `yaml:"client_id"`
	// BWLimit caps the bytes per second this process sends in request
	// bodies, in rclone's syntax (bwlimit.Parse): a rate such as 512k,
	// 10M or off, or a timetable such as "08:00,512k 18:00,10M 23:00,off".
	// Every batch of the process shares it; other processes have their
	// own. Default: off.
	BWLimit string `yaml:"bwlimit"`
	// ProgressInterval is how often the "upload progress" line is logged
	// when stderr is not a terminal. Default: 5s.
	ProgressInterval time.Duration `yaml:"progress_interval"`
	// Order is the order a flight's tiles are sent in: zoom (lowest zoom
	// level first, then by tile ID: the whole map's overview reaches the
	// provider before its detail) or id (by tile ID alone). Across every
	// process sharing a flight, each claim takes the next tiles in it.
	// Default: zoom.
	Order string `yaml:"order"`
}

// Cache governs the blob cache's disk space (see cachespace.go).
type Cache struct {
	// Retention, when set, makes every upload-pending run that ends with
	// success prune the cached blobs of tiles uploaded longer ago than it
	// (as `tilectl flights prune --uploaded-before`). A duration with an
	// optional d suffix for days: 30d, 36h. Default: unset (off).
	Retention string `yaml:"retention"`
	// MinFree is the free space tiles import leaves on the cache's
	// filesystem: it refuses an import that would leave less. Bytes with
	// an optional K, M, G or T suffix (powers of 1024: 2G), or a percent
	// of the filesystem (10%). Default: unset, which is the larger of
	// 1 GiB and 5% of the filesystem.
	MinFree string `yaml:"min_free"`
}

// Retry tunes the retry decorator.
type Retry struct {
	// MaxInCallRetries is how many more times one upload-pending run calls
	// the inner uploader while tiles remain pending. Default: 3.
	MaxInCallRetries int `yaml:"max_in_call_retries"`
	// MaxPerTileAttempts is the rejections a tile may collect before it is
	// given up (upload_giveup). Default: 5.
	MaxPerTileAttempts int `yaml:"max_per_tile_attempts"`
	// BackoffBase is the first wait between inner calls. Default: 2s.
	BackoffBase time.Duration `yaml:"backoff_base"`
	// BackoffCap is the longest wait between inner calls. Default: 60s.
	BackoffCap time.Duration `yaml:"backoff_cap"`
	// Jitter is none, full, equal or decorrelated; it randomises the
	// decorator's waits and the HTTP uploader's transport resend waits.
	// Default: none.
	Jitter string `yaml:"jitter"`
}

// Defaults that do not depend on the environment.
const (
	DefaultDatabaseURL      = "postgres://postgres@127.0.0.1:5432/tilectl?sslmode=disable"
	DefaultProviderURL      = "http://127.0.0.1:8765"
	DefaultFDRCapacityBytes = 4 << 20
	DefaultFDRFile          = "fdr.ring"
)

// Default returns the built-in defaults. CacheDir comes from XDG_CACHE_HOME
// or the home directory, read through getenv (os.Getenv when nil).
func Default(getenv func(string) string) *Config {
	if getenv == nil {
		getenv = os.Getenv
	}
	return &Config{
		DatabaseURL:      DefaultDatabaseURL,
		CacheDir:         defaultCacheDir(getenv),
		ProviderURL:      DefaultProviderURL,
		FDRCapacityBytes: DefaultFDRCapacityBytes,
		LogLevel:         "info",
		LogFormat:        "auto",
		Upload: Upload{
			Concurrency:    ConcurrencyAuto,
			BatchSize:      0,
			Deadline:       30 * time.Minute,
			RequestTimeout: 60 * time.Second,
			Lease:          30 * time.Second,

			FirstContactTimeout: 8 * time.Second,

			BreakerFailures:     5,
			BreakerCooldown:     5 * time.Second,
			BreakerMaxCooldown:  60 * time.Second,
			OutageLimit:         0,
			ResendBudget:        10,
			ResendBudgetPercent: 20,
			Order:               "zoom",
			BWLimit:             "off",
			ProgressInterval:    5 * time.Second,
		},
		Retry: Retry{
			MaxInCallRetries:   3,
			MaxPerTileAttempts: 5,
			BackoffBase:        2 * time.Second,
			BackoffCap:         60 * time.Second,
			Jitter:             "none",
		},
	}
}

func defaultCacheDir(getenv func(string) string) string {
	if x := getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "tilectl")
	}
	home := getenv("HOME")
	if home == "" {
		if h, err := os.UserHomeDir(); err == nil {
			home = h
		}
	}
	if home == "" {
		// No home at all (a bare container): a relative cache is better
		// than failing before the user can pass --cache-dir.
		return filepath.Join(".cache", "tilectl")
	}
	return filepath.Join(home, ".cache", "tilectl")
}

// Complete fills the fields whose default depends on other fields. Call it
// after flags are applied, before Validate.
func (c *Config) Complete() {
	if c.FDRPath == "" {
		c.FDRPath = filepath.Join(c.CacheDir, DefaultFDRFile)
	}
	if c.Upload.ClientID != "" && (c.Source("upload.concurrency").Kind == SourceDefault || c.Upload.Concurrency == ConcurrencyAuto) {
		// One batch in flight: batch n runs only once n-1 is committed.
		c.Upload.Concurrency = 1
	}
}
