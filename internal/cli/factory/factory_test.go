package factory

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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
