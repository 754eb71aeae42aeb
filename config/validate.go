package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/tilectl/tilectl/bwlimit"
)

// FieldError says which field is wrong, what it holds and what is allowed.
type FieldError struct {
	Key     string // e.g. "upload.concurrency"
	Value   string // already safe to print (the token is never put here)
	Allowed string // e.g. "must be 1..64"
	// Source is where the value came from (a flag, a variable, a file
	// line); the zero Source when it was never set (defaults, or code).
	Source Source
}

func (e *FieldError) Error() string {
	key := e.Key
	if e.Source.Kind != "" {
		key = fmt.Sprintf("%s (from %s)", e.Key, e.Source)
	}
	if e.Value == "" {
		return fmt.Sprintf("%s: %s", key, e.Allowed)
	}
	return fmt.Sprintf("%s: %s, got %s", key, e.Allowed, e.Value)
}

// Limits enforced by Validate.
const (
	MaxConcurrency      = 256
	MaxBatchSize        = 10000
	MinFDRCapacityBytes = 64 << 10
	MaxFDRCapacityBytes = 1 << 30
)

// Validate checks every field and returns all problems joined, each a
// *FieldError naming where the value came from (Source). Call Complete
// first. It is the one check for every source: defaults, file, environment
// and flags.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, value, allowed string) {
		errs = append(errs, &FieldError{Key: key, Value: value, Allowed: allowed, Source: c.sources[key]})
	}
	intRange := func(key string, v, lo, hi int64) {
		if v < lo || v > hi {
			bad(key, fmt.Sprint(v), fmt.Sprintf("must be %d..%d", lo, hi))
		}
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, d.String(), "must be a positive duration such as 2s")
		}
	}
	oneOf := func(key, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad(key, fmt.Sprintf("%q", v), "must be one of "+strings.Join(allowed, ", "))
	}

	if err := checkDatabaseURL(c.DatabaseURL); err != "" {
		bad("database_url", fmt.Sprintf("%q", redactURL(c.DatabaseURL)), err)
	}
	if strings.TrimSpace(c.CacheDir) == "" {
		bad("cache_dir", "", "must not be empty")
	}
	if err := checkHTTPURL(c.ProviderURL); err != "" {
		bad("provider_url", fmt.Sprintf("%q", redactURL(c.ProviderURL)), err)
	}
	if strings.IndexFunc(c.ProviderToken.Reveal(), badTokenRune) >= 0 {
		// The value itself is never shown, not even in part.
		bad("provider_token", "", "must not contain spaces, newlines or control characters (value not shown)")
	}
	if strings.TrimSpace(c.FDRPath) == "" {
		bad("fdr_path", "", "must not be empty")
	}
	intRange("fdr_capacity_bytes", c.FDRCapacityBytes, MinFDRCapacityBytes, MaxFDRCapacityBytes)
	oneOf("log_level", c.LogLevel, "trace", "debug", "info", "warn", "error")
	oneOf("log_format", c.LogFormat, "auto", "console", "json")

	if c.Upload.Concurrency != ConcurrencyAuto && (c.Upload.Concurrency < 1 || c.Upload.Concurrency > MaxConcurrency) {
		bad("upload.concurrency", c.Upload.Concurrency.String(), fmt.Sprintf("must be auto or 1..%d", MaxConcurrency))
	}
	if c.Upload.BatchSize < 0 || c.Upload.BatchSize > MaxBatchSize {
		bad("upload.batch_size", fmt.Sprint(c.Upload.BatchSize),
			fmt.Sprintf("must be 0 (the provider's maximum) or 1..%d", MaxBatchSize))
	}
	positive("upload.deadline", c.Upload.Deadline)
	positive("upload.request_timeout", c.Upload.RequestTimeout)
	positive("upload.first_contact_timeout", c.Upload.FirstContactTimeout)
	positive("upload.lease", c.Upload.Lease)
	intRange("upload.breaker_failures", int64(c.Upload.BreakerFailures), 0, 1000)
	positive("upload.breaker_cooldown", c.Upload.BreakerCooldown)
	positive("upload.breaker_max_cooldown", c.Upload.BreakerMaxCooldown)
	if c.Upload.BreakerCooldown > 0 && c.Upload.BreakerMaxCooldown > 0 && c.Upload.BreakerMaxCooldown < c.Upload.BreakerCooldown {
		bad("upload.breaker_max_cooldown", c.Upload.BreakerMaxCooldown.String(),
			fmt.Sprintf("must be at least upload.breaker_cooldown (%s)", c.Upload.BreakerCooldown))
	}
	if c.Upload.OutageLimit < 0 {
		bad("upload.outage_limit", c.Upload.OutageLimit.String(), "must be 0 (wait until upload.deadline) or a positive duration such as 10m")
	}
	if c.Upload.ClientID != "" {
		if !validClientID(c.Upload.ClientID) {
			bad("upload.client_id", fmt.Sprintf("%q", c.Upload.ClientID),
				"must be 1..128 characters of letters, digits, '.', '_', ':' and '-'")
		}
		if c.Upload.Concurrency > 1 {
			bad("upload.concurrency", fmt.Sprint(c.Upload.Concurrency), fmt.Sprintf(
				"must be 1 when upload.client_id is set (from %s): strict client sequencing keeps one batch in flight; "+
					"drop one of the two settings", c.Source("upload.client_id")))
		}
	}
	oneOf("upload.order", c.Upload.Order, "zoom", "id")
	if _, err := bwlimit.Parse(c.Upload.BWLimit); err != nil {
		bad("upload.bwlimit", fmt.Sprintf("%q", c.Upload.BWLimit), fmt.Sprintf("%v; write %s", err, bwlimit.Syntax))
	}
	positive("upload.progress_interval", c.Upload.ProgressInterval)
	intRange("upload.resend_budget", int64(c.Upload.ResendBudget), 0, 100000)
	intRange("upload.resend_budget_percent", int64(c.Upload.ResendBudgetPercent), 0, 100)

	intRange("retry.max_in_call_retries", int64(c.Retry.MaxInCallRetries), 0, 100)
	intRange("retry.max_per_tile_attempts", int64(c.Retry.MaxPerTileAttempts), 1, 1000)
	positive("retry.backoff_base", c.Retry.BackoffBase)
	positive("retry.backoff_cap", c.Retry.BackoffCap)
	if c.Retry.BackoffBase > 0 && c.Retry.BackoffCap > 0 && c.Retry.BackoffCap < c.Retry.BackoffBase {
		bad("retry.backoff_cap", c.Retry.BackoffCap.String(),
			fmt.Sprintf("must be at least retry.backoff_base (%s)", c.Retry.BackoffBase))
	}
	oneOf("retry.jitter", c.Retry.Jitter, "none", "full", "equal", "decorrelated")
	if _, err := c.ProviderTLS(time.Now()); err != nil {
		errs = append(errs, err)
	}
	if strings.TrimSpace(c.Cache.Retention) != "" {
		if _, err := ParseAge(c.Cache.Retention); err != nil {
			bad("cache.retention", "", err.Error()+" (leave it unset to keep every blob)")
		}
	}
	if _, err := ParseMinFree(c.Cache.MinFree); err != nil {
		bad("cache.min_free", "", err.Error())
	}
	return errors.Join(errs...)
}

func validClientID(s string) bool {
	if len(s) > 128 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r)
		if !ok {
			return false
		}
	}
	return s != ""
}

func badTokenRune(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

func checkDatabaseURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "must be a URL like postgres://user@host:5432/dbname"
	}
	return ""
}

func checkHTTPURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be an http:// or https:// URL with a host"
	}
	return ""
}

// redactURL hides a password embedded in a URL. An unparsable string that
// looks like it carries credentials is not shown at all.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") {
			return "(unparsable URL with credentials, not shown)"
		}
		return s
	}
	return u.Redacted()
}

// RedactURL is redactURL for other packages that print database URLs.
func RedactURL(s string) string { return redactURL(s) }
