package factory

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
)

func newTest(env map[string]string) *Factory {
	ios, _, _, _ := iostreams.Test()
	return NewWith(ios, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "t", "")
}

func TestConfigIsLoadedOnceWithFlagsApplied(t *testing.T) {
	f := newTest(map[string]string{"TILECTL_LOG_LEVEL": "warn", "TILECTL_CACHE_DIR": "/c"})
	calls := 0
	f.ApplyFlags = func(c *config.Config) error { calls++; return c.Set("log_level", "debug") }
	a, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.Config()
	if a != b || calls != 1 {
		t.Fatalf("config loaded %d times", calls)
	}
	if a.LogLevel != "debug" || a.FDRPath != "/c/fdr.ring" {
		t.Fatalf("log_level %q fdr_path %q", a.LogLevel, a.FDRPath)
	}
}

func TestBadConfigIsAUsageError(t *testing.T) {
	f := newTest(map[string]string{"TILECTL_RETRY_JITTER": "lots"})
	_, err := f.Config()
	if exitcode.Code(err) != exitcode.Usage || !strings.Contains(err.Error(), `retry.jitter (from env TILECTL_RETRY_JITTER): must be one of none, full, equal, decorrelated, got "lots"`) {
		t.Fatalf("err = %v (code %d)", err, exitcode.Code(err))
	}
}

func TestLoggerWritesJSONToStderrAtTheConfiguredLevel(t *testing.T) {
	ios, _, out, errOut := iostreams.Test()
	env := map[string]string{"TILECTL_LOG_LEVEL": "warn", "TILECTL_PROVIDER_TOKEN": "tok-SECRET"}
	f := NewWith(ios, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "t", "")
	log := f.Logger()
	c, _ := f.Config()
	log.Info().Msg("hidden")
	log.Warn().Object("config", c).Msg("shown")
	if out.Len() != 0 {
		t.Fatalf("logger wrote to stdout: %q", out)
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want only the warn line, got %q", errOut)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("not JSON off a terminal: %q", lines[0])
	}
	if rec["message"] != "shown" || strings.Contains(lines[0], "SECRET") {
		t.Fatalf("record %q", lines[0])
	}
}

func TestStoreOpensOnceAndClosesAtClose(t *testing.T) {
	f := newTest(map[string]string{"TILECTL_DATABASE_URL": pgtest.NewURL(t)})
	ctx := context.Background()
	a, err := f.Store(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.Store(ctx)
	if a != b {
		t.Fatal("store opened twice")
	}
	f.Close()
	if err := a.Pool().Ping(ctx); err == nil {
		t.Fatal("pool still open after Close")
	}
}

func TestAMisspeltTILECTLVariableIsWarnedAboutNamingTheClosestKnownOne(t *testing.T) {
	ios, _, _, errOut := iostreams.Test()
	misspelt := config.EnvPrefix + "UPLOAD_CONCURENCY" // from parts: config's scan of the repository must not see it
	env := map[string]string{misspelt: "8", "TILECTL_TEST_DATABASE_URL": "postgres://x"}
	f := NewWith(ios, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "test", "")
	f.Environ = func() []string {
		return []string{misspelt + "=8", "TILECTL_TEST_DATABASE_URL=postgres://x", "HOME=/root"}
	}
	if _, err := f.Config(); err != nil {
		t.Fatal(err)
	}
	got := errOut.String()
	if !strings.Contains(got, misspelt+" is ignored") || !strings.Contains(got, "did you mean TILECTL_UPLOAD_CONCURRENCY?") {
		t.Errorf("stderr %q does not warn about the misspelt variable naming the right one", got)
	}
	if strings.Contains(got, "TILECTL_TEST_DATABASE_URL") {
		t.Errorf("warns about the test harness's variable: %q", got)
	}
}

func annotatedFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fl := pflag.NewFlagSet("upload-pending", pflag.ContinueOnError)
	fl.String("concurrency", "", "")
	fl.Duration("deadline", 0, "")
	fl.String("flight", "", "") // sets no configuration field
	_ = fl.SetAnnotation("concurrency", ConfigKeyAnnotation, []string{"upload.concurrency"})
	_ = fl.SetAnnotation("deadline", ConfigKeyAnnotation, []string{"upload.deadline"})
	if err := fl.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fl
}

func TestAnnotatedFlagsTheUserSetOverrideTheConfigurationNamingTheFlagAsTheSource(t *testing.T) {
	c := config.Default(func(string) string { return "" })
	if err := ApplyConfigFlags(c, annotatedFlags(t, "--concurrency", "8", "--flight", "F1")); err != nil {
		t.Fatal(err)
	}
	if c.Upload.Concurrency != 8 || c.Source("upload.concurrency").String() != "flag --concurrency" {
		t.Errorf("upload.concurrency %s from %s, want 8 from the flag", c.Upload.Concurrency, c.Source("upload.concurrency"))
	}
	if c.Upload.Deadline != 30*time.Minute || c.Source("upload.deadline").Kind != config.SourceDefault {
		t.Errorf("an annotated flag the user did not set changed upload.deadline to %s (from %s)", c.Upload.Deadline, c.Source("upload.deadline"))
	}
	err := ApplyConfigFlags(c, annotatedFlags(t, "--concurrency", "many"))
	if err == nil || !strings.Contains(err.Error(), "--concurrency") || !strings.Contains(err.Error(), "(from flag --concurrency)") {
		t.Errorf("err = %v, want one naming the flag", err)
	}
}

func TestAConfigurationBuiltInCodeGetsTheFlagsAndIsCompletedAndValidated(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--deadline", "45s"}},
		{args: []string{"--deadline", "0s"}, wantErr: "upload.deadline (from flag --deadline)"},
	} {
		f := newTest(nil)
		f.Load = func() (*config.Config, error) {
			c := config.Default(func(string) string { return "" })
			c.CacheDir = "/built"
			return c, nil
		}
		fl := annotatedFlags(t, tc.args...)
		f.ApplyFlags = func(c *config.Config) error { return ApplyConfigFlags(c, fl) }
		c, err := f.Config()
		if tc.wantErr != "" {
			if exitcode.Code(err) != exitcode.Usage || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err = %v (exit %d), want exit 2 naming %s", tc.args, err, exitcode.Code(err), tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if c.Upload.Deadline != 45*time.Second || c.FDRPath != "/built/fdr.ring" {
			t.Errorf("%q: deadline %s fdr_path %q, want the flag's and the completed path", tc.args, c.Upload.Deadline, c.FDRPath)
		}
	}
}
