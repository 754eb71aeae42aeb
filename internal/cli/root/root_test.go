package root

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
)

type result struct {
	code        int
	out, errOut string
	f           *factory.Factory
}

// execute runs a command line the way main does, with env as the whole
// environment.
func execute(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	f := factory.NewWith(ios, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "test", "abc123")
	defer f.Close()
	err := Execute(context.Background(), f, args)
	if err != nil {
		errOut.WriteString("tilectl: " + err.Error() + "\n")
	}
	return result{code: exitcode.Code(err), out: out.String(), errOut: errOut.String(), f: f}
}

func TestUsageMistakesExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"migrate", "sideways"},
		{"--no-such-flag", "version"},
		{"status", "extra-arg"},
		{"migrate", "down", "zero"},
		{"tiles", "import", "dir"}, // --flight missing
		{"tiles", "import", "--flight", "a/b", "dir"},
		{"status", "-o", "yaml"},
	} {
		r := execute(t, nil, args...)
		if r.code != exitcode.Usage {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, r.code, r.errOut)
		}
	}
}

func TestUnknownConfigKeyExitsTwoNamingKeyAndFile(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("cache_dir: /tmp/x\nprovder_url: http://x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := execute(t, nil, "--config", cfg, "status")
	if r.code != exitcode.Usage {
		t.Fatalf("exit %d, want 2; stderr %q", r.code, r.errOut)
	}
	for _, want := range []string{cfg, "line 2", `"provder_url"`} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("stderr %q does not mention %s", r.errOut, want)
		}
	}
}

func TestInvalidConfigValueExitsTwo(t *testing.T) {
	r := execute(t, map[string]string{"TILECTL_UPLOAD_CONCURRENCY": "0"}, "status")
	if r.code != exitcode.Usage || !strings.Contains(r.errOut, "upload.concurrency (from env TILECTL_UPLOAD_CONCURRENCY): must be auto or 1..256, got 0") {
		t.Fatalf("exit %d stderr %q", r.code, r.errOut)
	}
}

func TestUnreachableDatabaseExitsOneWithAClearMessage(t *testing.T) {
	r := execute(t, map[string]string{"TILECTL_DATABASE_URL": "postgres://postgres:pw-secret@127.0.0.1:1/x?sslmode=disable"}, "status")
	if r.code != exitcode.Failure {
		t.Fatalf("exit %d, want 1", r.code)
	}
	if !strings.Contains(r.errOut, "cannot reach Postgres at 127.0.0.1:1") || strings.Contains(r.errOut, "pw-secret") {
		t.Fatalf("stderr %q", r.errOut)
	}
}

func TestFlagBeatsEnvironment(t *testing.T) {
	r := execute(t, map[string]string{"TILECTL_LOG_LEVEL": "warn", "TILECTL_CACHE_DIR": "/env"},
		"--log-level", "debug", "version")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	c, err := r.f.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.LogLevel != "debug" || c.CacheDir != "/env" {
		t.Fatalf("log_level %q cache_dir %q, want debug (flag) and /env (env)", c.LogLevel, c.CacheDir)
	}
}

func TestProviderTokenFileIsReadAndNeverShown(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("s3cr3t-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := execute(t, nil, "--provider-token-file", p, "version")
	c, err := r.f.Config()
	if err != nil || c.ProviderToken.Reveal() != "s3cr3t-token" {
		t.Fatalf("token not read (err %v)", err)
	}
	if strings.Contains(r.out+r.errOut, "s3cr3t") {
		t.Fatal("token printed")
	}
}

func TestMigrateImportStatusEndToEnd(t *testing.T) {
	env := map[string]string{"TILECTL_DATABASE_URL": pgtest.NewEmptyDatabase(t), "TILECTL_CACHE_DIR": t.TempDir()}
	steps := [][]string{
		{"migrate", "up"},
		{"tiles", "import", "--flight", "demo-1", "../../../testdata/tiles"},
		{"status", "-o", "json"},
	}
	var last result
	for _, s := range steps {
		last = execute(t, env, s...)
		if last.code != 0 {
			t.Fatalf("%v: exit %d: %s", s, last.code, last.errOut)
		}
	}
	var rep struct {
		Flights []struct {
			FlightID string           `json:"flight_id"`
			Counts   map[string]int64 `json:"counts"`
		} `json:"flights"`
	}
	if err := json.NewDecoder(bytes.NewBufferString(last.out)).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Flights) != 1 || rep.Flights[0].FlightID != "demo-1" || rep.Flights[0].Counts["pending"] != 48 {
		t.Fatalf("status after import: %s", last.out)
	}
}

// Every flag that sets a configuration field is held to the bounds the
// configuration enforces (config.Validate), and the error names the flag.
// The database is unreachable: a value that slipped through would exit 1.
func TestEveryConfigFlagIsValidatedLikeItsConfigValue(t *testing.T) {
	env := map[string]string{"TILECTL_DATABASE_URL": "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"upload-pending", "--concurrency", "300000"}, "upload.concurrency (from flag --concurrency): must be auto or 1..256, got 300000"},
		{[]string{"upload-pending", "--concurrency", "0"}, "--concurrency"},
		{[]string{"upload-pending", "--batch-size", "10001"}, "upload.batch_size (from flag --batch-size)"},
		{[]string{"upload-pending", "--batch-size", "-1"}, "--batch-size"},
		{[]string{"upload-pending", "--max-in-call-retries", "101"}, "retry.max_in_call_retries (from flag --max-in-call-retries)"},
		{[]string{"upload-pending", "--max-per-tile-attempts", "1001"}, "retry.max_per_tile_attempts (from flag --max-per-tile-attempts)"},
		{[]string{"upload-pending", "--backoff-base", "0s"}, "retry.backoff_base (from flag --backoff-base)"},
		{[]string{"upload-pending", "--backoff-cap", "1ms"}, "retry.backoff_cap (from flag --backoff-cap): must be at least retry.backoff_base"},
		{[]string{"upload-pending", "--deadline", "-1s"}, "upload.deadline (from flag --deadline)"},
		{[]string{"--database-url", "mysql://x", "status"}, "database_url (from flag --database-url)"},
		{[]string{"--provider-url", "ftp://x", "status"}, "provider_url (from flag --provider-url)"},
		{[]string{"--log-level", "loud", "status"}, "log_level (from flag --log-level)"},
		{[]string{"--cache-dir", " ", "status"}, "cache_dir (from flag --cache-dir)"},
	} {
		r := execute(t, env, tc.args...)
		if r.code != exitcode.Usage || !strings.Contains(r.errOut, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q; stderr %q", tc.args, r.code, tc.want, r.errOut)
		}
	}
}

func TestInvalidEnvironmentValueErrorNamesTheVariable(t *testing.T) {
	r := execute(t, map[string]string{"TILECTL_UPLOAD_CONCURRENCY": "300000"}, "status")
	want := "upload.concurrency (from env TILECTL_UPLOAD_CONCURRENCY): must be auto or 1..256, got 300000"
	if r.code != exitcode.Usage || !strings.Contains(r.errOut, want) {
		t.Fatalf("exit %d, want 2 with %q; stderr %q", r.code, want, r.errOut)
	}
}

func TestGroupReadableTokenFileIsWarnedAbout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("s3cr3t-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := execute(t, nil, "--provider-token-file", p, "config", "view")
	if r.code != 0 || !strings.Contains(r.errOut, "readable by group or others") || !strings.Contains(r.errOut, "chmod 600 "+p) {
		t.Fatalf("exit %d, stderr %q: want a warning naming chmod 600", r.code, r.errOut)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := execute(t, nil, "--provider-token-file", p, "config", "view"); strings.Contains(r.errOut, "warning") {
		t.Fatalf("0600 file warned about: %q", r.errOut)
	}
}

// A flag overrides the environment before anything is validated: a valid
// --concurrency wins over an invalid TILECTL_UPLOAD_CONCURRENCY (the
// database is unreachable, so the run gets as far as exit 1).
func TestValidFlagOverridesAnInvalidEnvironmentValue(t *testing.T) {
	env := map[string]string{
		"TILECTL_DATABASE_URL":       "postgres://postgres@127.0.0.1:1/x?sslmode=disable",
		"TILECTL_UPLOAD_CONCURRENCY": "0",
		"TILECTL_PROVIDER_TOKEN":     "t0ken",
	}
	r := execute(t, env, "upload-pending", "--concurrency", "4")
	if r.code == exitcode.Usage || strings.Contains(r.errOut, "upload.concurrency") {
		t.Fatalf("exit %d although --concurrency 4 overrides the environment: %q", r.code, r.errOut)
	}
}

// The hint in a database connection error names where the URL came from:
// a user who passed --database-url is not told to check an environment
// variable they never set.
func TestDatabaseConnectErrorNamesWhereTheURLCameFrom(t *testing.T) {
	const bad = "postgres://postgres@127.0.0.1:1/x?sslmode=disable"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"flag", nil, []string{"--database-url", bad, "status"}, "database_url (from flag --database-url)"},
		{"environment", map[string]string{"TILECTL_DATABASE_URL": bad}, []string{"status"}, "database_url (from env TILECTL_DATABASE_URL)"},
		{"flag, migrate", nil, []string{"--database-url", bad, "migrate", "up"}, "database_url (from flag --database-url)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execute(t, tc.env, tc.args...)
			if r.code != exitcode.Failure || !strings.Contains(r.errOut, "cannot reach Postgres at 127.0.0.1:1") || !strings.Contains(r.errOut, tc.want) {
				t.Fatalf("exit %d, want 1 with %q; stderr %q", r.code, tc.want, r.errOut)
			}
			if tc.env == nil && strings.Contains(r.errOut, "TILECTL_DATABASE_URL") {
				t.Fatalf("the URL came from a flag, but the error blames the environment: %q", r.errOut)
			}
		})
	}
}

// A flag that sets a config field is refused (exit 2, naming the flag) on
// every command, also one that needs no configuration for what it was asked
// (fdr tail --file) and before a command starts its work (tiles import
// checks the configuration before it reads a directory of tiles).
func TestConfigFlagIsRefusedOnEveryCommand(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "not-a-tile.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"fdr", "tail", "--file", filepath.Join(dir, "no-ring"), "--log-level", "loud"},
		{"tiles", "import", "--flight", "f1", dir, "--log-level", "loud"},
		{"version", "--log-level", "loud"},
	} {
		r := execute(t, nil, args...)
		if r.code != exitcode.Usage || !strings.Contains(r.errOut, "log_level (from flag --log-level)") {
			t.Errorf("%v: exit %d, want 2 naming --log-level; stderr %q", args, r.code, r.errOut)
		}
	}
}
