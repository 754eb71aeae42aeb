package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func envMap(m map[string]string) LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tilectl.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustLoad(t *testing.T, path string, env map[string]string) *Config {
	t.Helper()
	c, err := Load(path, envMap(env))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestDefaultsAreValidAndDocumented(t *testing.T) {
	c := mustLoad(t, "", map[string]string{"HOME": "/home/pilot"})
	c.Complete()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	want := map[string]string{
		"database_url":                   DefaultDatabaseURL,
		"cache_dir":                      "/home/pilot/.cache/tilectl",
		"provider_url":                   "http://127.0.0.1:8765",
		"provider_token":                 "",
		"fdr_path":                       "/home/pilot/.cache/tilectl/fdr.ring",
		"fdr_capacity_bytes":             "4194304",
		"log_level":                      "info",
		"log_format":                     "auto",
		"upload.concurrency":             "auto",
		"upload.batch_size":              "0",
		"provider_ca_file":               "",
		"provider_client_cert":           "",
		"provider_client_key":            "",
		"upload.deadline":                "30m0s",
		"upload.insecure_skip_verify":    "false",
		"upload.disable_retry_decorator": "false",
		"upload.request_timeout":         "1m0s",
		"upload.first_contact_timeout":   "8s",
		"upload.lease":                   "30s",
		"upload.metrics_file":            "",
		"upload.breaker_failures":        "5",
		"upload.breaker_cooldown":        "5s",
		"upload.breaker_max_cooldown":    "1m0s",
		"upload.outage_limit":            "0s",
		"upload.resend_budget":           "10",
		"upload.resend_budget_percent":   "20",
		"upload.client_id":               "",
		"upload.order":                   "zoom",
		"upload.bwlimit":                 "off",
		"upload.progress_interval":       "5s",
		"retry.max_in_call_retries":      "3",
		"retry.max_per_tile_attempts":    "5",
		"retry.backoff_base":             "2s",
		"retry.backoff_cap":              "1m0s",
		"retry.jitter":                   "none",
		"cache.retention":                "",
		"cache.min_free":                 "",
	}
	fields := c.Fields()
	if len(fields) != len(want) {
		t.Errorf("Config has %d fields, test knows %d: document the new one here and in README", len(fields), len(want))
	}
	for _, f := range fields {
		if got, ok := want[f.Key]; !ok || got != f.Value() {
			t.Errorf("default %s = %q, want %q", f.Key, f.Value(), got)
		}
	}
}

func TestCacheDirFollowsXDG(t *testing.T) {
	c := mustLoad(t, "", map[string]string{"HOME": "/home/pilot", "XDG_CACHE_HOME": "/xdg"})
	c.Complete()
	if c.CacheDir != "/xdg/tilectl" || c.FDRPath != "/xdg/tilectl/fdr.ring" {
		t.Fatalf("cache %q fdr %q, want under /xdg/tilectl", c.CacheDir, c.FDRPath)
	}
}

func TestPrecedenceFlagOverEnvOverFileOverDefault(t *testing.T) {
	file := writeFile(t, `
log_level: debug          # file beats default
cache_dir: /from/file     # env beats file
provider_url: http://file:1
upload:
  concurrency: 8
  deadline: 5m
retry:
  backoff_base: 3s
`)
	env := map[string]string{
		"TILECTL_CACHE_DIR":          "/from/env",
		"TILECTL_PROVIDER_URL":       "http://env:2", // flag beats env
		"TILECTL_UPLOAD_CONCURRENCY": "16",
		"TILECTL_RETRY_JITTER":       "full",
	}
	c := mustLoad(t, file, env)
	if err := c.Set("provider_url", "http://flag:3"); err != nil {
		t.Fatal(err)
	}
	c.Complete()
	checks := []struct{ name, got, want string }{
		{"default", c.DatabaseURL, DefaultDatabaseURL},
		{"file over default", c.LogLevel, "debug"},
		{"file duration", c.Upload.Deadline.String(), "5m0s"},
		{"file nested", c.Retry.BackoffBase.String(), "3s"},
		{"env over file", c.CacheDir, "/from/env"},
		{"env over file (nested)", c.Upload.Concurrency.String(), "16"},
		{"env over default (nested)", c.Retry.Jitter, "full"},
		{"flag over env", c.ProviderURL, "http://flag:3"},
		{"derived from final cache dir", c.FDRPath, "/from/env/fdr.ring"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: got %q, want %q", ck.name, ck.got, ck.want)
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigFileFromEnvironment(t *testing.T) {
	file := writeFile(t, "log_level: warn\n")
	c := mustLoad(t, "", map[string]string{ConfigFileEnv: file})
	if c.LogLevel != "warn" {
		t.Fatalf("TILECTL_CONFIG file not read: log_level %q", c.LogLevel)
	}
}

func TestMissingConfigFileNamesIt(t *testing.T) {
	_, err := Load("/nonexistent/tilectl.yaml", envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/tilectl.yaml") {
		t.Fatalf("err = %v, want it to name the file", err)
	}
}

func TestUnknownKeyNamesKeyLineAndFile(t *testing.T) {
	file := writeFile(t, "log_level: info\nupload:\n  concurency: 3\n")
	_, err := Load(file, envMap(nil))
	if err == nil {
		t.Fatal("unknown key accepted")
	}
	for _, want := range []string{file, "line 3", `"upload.concurency"`, "concurrency"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestFileValueErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"int", "upload:\n  concurrency: lots\n", `line 2: upload.concurrency: want auto or a number of batches from 1 to 256, got "lots"`},
		{"duration without unit", "retry:\n  backoff_base: 2\n", `line 2: retry.backoff_base: want a duration such as 2s or 30m, got "2"`},
		{"bool", "upload:\n  insecure_skip_verify: maybe\n", `upload.insecure_skip_verify: want true or false, got "maybe"`},
		{"list for scalar", "log_level: [a]\n", "line 1: log_level: want a string, got a list"},
		{"scalar for section", "upload: 3\n", "line 1: upload: want a mapping of keys, got a single value"},
		{"top level list", "- a\n", "top level: want a mapping"},
		{"null for int", "upload:\n  concurrency:\n", "upload.concurrency: want auto or a number of batches, got nothing"},
		{"syntax", "a: [\n", "yaml:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.yaml), envMap(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestEnvParseErrorsNameTheVariable(t *testing.T) {
	_, err := Load("", envMap(map[string]string{
		"TILECTL_UPLOAD_CONCURRENCY":          "four",
		"TILECTL_RETRY_BACKOFF_CAP":           "forever",
		"TILECTL_UPLOAD_INSECURE_SKIP_VERIFY": "yes please",
	}))
	if err == nil {
		t.Fatal("bad environment accepted")
	}
	for _, want := range []string{
		`environment TILECTL_UPLOAD_CONCURRENCY: want auto or a number of batches from 1 to 256, got "four"`,
		`environment TILECTL_RETRY_BACKOFF_CAP: want a duration`,
		`environment TILECTL_UPLOAD_INSECURE_SKIP_VERIFY: want true or false`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestEmptyFileChangesNothing(t *testing.T) {
	for _, body := range []string{"", "# only a comment\n", "~\n", "upload:\n"} {
		c := mustLoad(t, writeFile(t, body), nil)
		if c.Upload.Concurrency != ConcurrencyAuto || c.LogLevel != "info" {
			t.Errorf("file %q changed defaults: %+v", body, c)
		}
	}
}

// An empty key ("?" alone is a YAML mapping with a null key) is an unknown
// key, not a way into the loader's unexported fields (it panicked).
func TestEmptyKeyIsAnUnknownKeyNotAPanic(t *testing.T) {
	for _, body := range []string{"?\n", "? \n: x\n", "upload:\n  ? \n"} {
		file := writeFile(t, body)
		_, err := Load(file, envMap(nil))
		if err == nil || !strings.Contains(err.Error(), "unknown key") {
			t.Errorf("config %q: err = %v; want an unknown-key error", body, err)
		}
	}
}
