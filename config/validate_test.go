package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"
)

func validConfig() *Config {
	c := Default(func(string) string { return "" })
	c.CacheDir = "/cache"
	c.Complete()
	return c
}

func TestValidateNamesFieldValueAndAllowed(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"concurrency negative", func(c *Config) { c.Upload.Concurrency = -1 }, "upload.concurrency: must be auto or 1..256, got -1"},
		{"concurrency too high", func(c *Config) { c.Upload.Concurrency = 257 }, "upload.concurrency: must be auto or 1..256, got 257"},
		{"batch size negative", func(c *Config) { c.Upload.BatchSize = -1 }, "upload.batch_size: must be 0 (the provider's maximum) or 1..10000, got -1"},
		{"deadline zero", func(c *Config) { c.Upload.Deadline = 0 }, "upload.deadline: must be a positive duration such as 2s, got 0s"},
		{"request timeout negative", func(c *Config) { c.Upload.RequestTimeout = -time.Second }, "upload.request_timeout: must be a positive duration"},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, `log_level: must be one of trace, debug, info, warn, error, got "loud"`},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, `log_format: must be one of auto, console, json, got "xml"`},
		{"jitter", func(c *Config) { c.Retry.Jitter = "some" }, `retry.jitter: must be one of none, full, equal, decorrelated, got "some"`},
		{"attempts", func(c *Config) { c.Retry.MaxPerTileAttempts = 0 }, "retry.max_per_tile_attempts: must be 1..1000, got 0"},
		{"in-call retries", func(c *Config) { c.Retry.MaxInCallRetries = -1 }, "retry.max_in_call_retries: must be 0..100, got -1"},
		{"cap below base", func(c *Config) { c.Retry.BackoffCap = time.Second }, "retry.backoff_cap: must be at least retry.backoff_base (2s), got 1s"},
		{"fdr capacity", func(c *Config) { c.FDRCapacityBytes = 10 }, "fdr_capacity_bytes: must be 65536..1073741824, got 10"},
		{"cache dir", func(c *Config) { c.CacheDir = " " }, "cache_dir: must not be empty"},
		{"provider url scheme", func(c *Config) { c.ProviderURL = "ftp://x" }, `provider_url: must be an http:// or https:// URL with a host, got "ftp://x"`},
		{"provider url unparsable", func(c *Config) { c.ProviderURL = "http://[::1" }, "provider_url: must be an http:// or https:// URL"},
		{"database url scheme", func(c *Config) { c.DatabaseURL = "mysql://db" }, `database_url: must be a URL like postgres://user@host:5432/dbname, got "mysql://db"`},
		{"database url password hidden", func(c *Config) { c.DatabaseURL = "mysql://u:hunter2@db" }, `got "mysql://u:xxxxx@db"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("password leaked: %v", err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a *FieldError: %T", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := validConfig()
	c.Upload.Concurrency = -1
	c.LogLevel = "loud"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "upload.concurrency") || !strings.Contains(err.Error(), "log_level") {
		t.Fatalf("want both problems, got %v", err)
	}
}

const token = "tok-SUPERSECRET-123"

func TestBadTokenIsRefusedWithoutEchoingIt(t *testing.T) {
	c := validConfig()
	c.ProviderToken = NewSecret(token + "\n")
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "provider_token") {
		t.Fatalf("token with newline accepted: %v", err)
	}
	if strings.Contains(err.Error(), "SUPERSECRET") {
		t.Fatalf("token echoed: %v", err)
	}
}

func TestTokenIsRedactedEverywhere(t *testing.T) {
	c := validConfig()
	c.ProviderToken = NewSecret(token)
	if c.ProviderToken.Reveal() != token {
		t.Fatal("Reveal lost the value")
	}

	outputs := map[string]string{
		"%v":       fmt.Sprintf("%v", c),
		"%+v":      fmt.Sprintf("%+v", c),
		"%#v":      fmt.Sprintf("%#v", c),
		"%s token": fmt.Sprintf("%s", c.ProviderToken),
		"%d token": fmt.Sprintf("%d", c.ProviderToken),
		"%x token": fmt.Sprintf("%x", c.ProviderToken),
		"%q token": fmt.Sprintf("%q", c.ProviderToken),
	}
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs["json"] = string(j)
	y, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs["yaml"] = string(y)
	txt, _ := c.ProviderToken.MarshalText()
	outputs["text"] = string(txt)

	var buf bytes.Buffer
	log := zerolog.New(&buf)
	log.Info().Object("config", c).Msg("effective")
	log.Info().Object("token", c.ProviderToken).Msg("o")
	log.Info().Interface("cfg", c).Msg("iface")
	log.Info().Stringer("token", c.ProviderToken).Msg("s")
	outputs["zerolog"] = buf.String()

	for name, out := range outputs {
		if strings.Contains(out, "SUPERSECRET") {
			t.Errorf("%s leaks the token: %s", name, out)
		}
		if !strings.Contains(out, Redacted) {
			t.Errorf("%s does not show %s: %s", name, Redacted, out)
		}
	}
}

func TestUnsetTokenShowsEmpty(t *testing.T) {
	var s Secret
	if s.String() != "" || fmt.Sprint(s) != "" || s.IsSet() {
		t.Fatalf("unset secret shows %q", s.String())
	}
}

func TestTokenFromYAMLAcceptsAnyScalar(t *testing.T) {
	c := mustLoad(t, writeFile(t, "provider_token: 0123\n"), nil)
	if c.ProviderToken.Reveal() != "0123" {
		t.Fatalf("token = %q, want the literal text 0123", c.ProviderToken.Reveal())
	}
	_, err := Load(writeFile(t, "provider_token: [SUPERSECRET]\n"), envMap(nil))
	if err == nil || strings.Contains(err.Error(), "SUPERSECRET") {
		t.Fatalf("list token: err = %v (must fail, must not echo)", err)
	}
}

func TestCacheRetentionAndMinFreeAreReadOrRefusedNamingTheirSource(t *testing.T) {
	for _, tc := range []struct {
		retention, minFree string
		wantAge            time.Duration
		wantReserve        int64 // on a 100 GiB filesystem
		wantErr            string
	}{
		{"", "", 0, 5 << 30, ""},
		{"30d", "2G", 30 * 24 * time.Hour, 2 << 30, ""},
		{"36h", "10%", 36 * time.Hour, 10 << 30, ""},
		{"1.5d", "1073741824", 36 * time.Hour, 1 << 30, ""},
		{"7 days", "", 0, 0, `cache.retention (from env TILECTL_CACHE_RETENTION): want an age such as 7d, 36h or 90m, got "7 days"`},
		{"-1d", "", 0, 0, "cache.retention"},
		{"", "lots", 0, 0, `cache.min_free (from env TILECTL_CACHE_MIN_FREE): want bytes such as 2G`},
		{"", "120%", 0, 0, "cache.min_free"},
	} {
		env := map[string]string{"TILECTL_CACHE_RETENTION": tc.retention, "TILECTL_CACHE_MIN_FREE": tc.minFree}
		c, err := Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok && v != "" })
		if err != nil {
			t.Fatal(err)
		}
		c.Complete()
		err = c.Validate()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("retention %q min_free %q: err %v, want one containing %q", tc.retention, tc.minFree, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("retention %q min_free %q: %v", tc.retention, tc.minFree, err)
			continue
		}
		if got := c.RetentionAge(); got != tc.wantAge {
			t.Errorf("retention %q: age %s, want %s", tc.retention, got, tc.wantAge)
		}
		if got := c.CacheMinFree().Reserve(100 << 30); got != tc.wantReserve {
			t.Errorf("min_free %q: reserve %d, want %d", tc.minFree, got, tc.wantReserve)
		}
	}
}
