package upload

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
)

// loadConfigFile loads a config file as tilectl does (no environment but
// env) and points the rig's database, cache, provider and token at the
// rig's: the file's upload and retry settings, and their sources, stay.
func (r *cmdRig) loadConfigFile(yaml string, env map[string]string) string {
	r.t.Helper()
	path := filepath.Join(r.t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		r.t.Fatal(err)
	}
	c, err := config.Load(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		r.t.Fatal(err)
	}
	c.DatabaseURL, c.CacheDir, c.ProviderURL = r.cfg.DatabaseURL, r.cfg.CacheDir, r.cfg.ProviderURL
	c.ProviderToken, c.FDRPath = r.cfg.ProviderToken, r.cfg.FDRPath
	if c.Upload.MetricsFile != "" {
		c.Upload.MetricsFile = filepath.Join(r.dir, "metrics.prom")
	}
	c.Complete()
	if err := c.Validate(); err != nil {
		r.t.Fatal(err)
	}
	r.cfg = *c
	return path
}

func noWarnings(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
			t.Errorf("warns at start-up: %s", line)
		}
	}
}

// readmeExampleConfig is the example config file the README shows.
func readmeExampleConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)For example\\s+`/etc/tilectl/config.yaml`:\\s+```yaml\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README has no example config after \"For example `/etc/tilectl/config.yaml`:\"")
	}
	return string(m[1])
}

// demoUploadArgs are the arguments scripts/demo.sh (make demo) runs
// upload-pending with.
func demoUploadArgs(t *testing.T, metricsFile string) []string {
	t.Helper()
	b, err := os.ReadFile("../../../scripts/demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(script, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "step" || fields[1] != "upload-pending" {
			continue
		}
		args := fields[2:]
		for i := range args {
			if i > 0 && args[i-1] == "--metrics-file" {
				args[i] = metricsFile
			}
		}
		return args
	}
	t.Fatal("scripts/demo.sh runs no 'step upload-pending'")
	return nil
}

func TestTheReadmeExampleConfigStartsWithoutAWarning(t *testing.T) {
	r := newCmdRig(t)
	path := r.loadConfigFile(readmeExampleConfig(t), nil)
	if r.cfg.Source("upload.deadline").Kind != config.SourceFile {
		t.Fatalf("the README example does not set upload.deadline in %s", path)
	}
	r.seed("F1", tilestore.FlightOnGround, 2)
	res := r.run(func(o *Options) { o.FlightID = "F1" })
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
	}
	noWarnings(t, res.stderr)
}

func TestTheDemoSettingsStartWithoutAWarning(t *testing.T) {
	r := newCmdRig(t)
	r.seed("demo-1", tilestore.FlightOnGround, 2)
	args := demoUploadArgs(t, filepath.Join(r.dir, "metrics.prom"))
	res := r.run(nil, args...)
	if res.code != exitcode.OK {
		t.Fatalf("%q: exit %d (%v)\n%s", args, res.code, res.err, res.stderr)
	}
	noWarnings(t, res.stderr)
}

// A deadline shorter than one request's timeout cannot let a slow request
// finish: that is worth a warning, naming where the deadline was set.
func TestADeadlineOneRequestCannotFitWarnsNamingItsRealSource(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		flags      []string
		source     func(path string) string
	}{
		{name: "config file", file: "upload:\n  deadline: 45s\n",
			source: func(path string) string { return "file " + path + ":2" }},
		{name: "environment", env: map[string]string{"TILECTL_UPLOAD_DEADLINE": "45s"},
			source: func(string) string { return "env TILECTL_UPLOAD_DEADLINE" }},
		{name: "flag", flags: []string{"--deadline", "45s"},
			source: func(string) string { return "flag --deadline" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCmdRig(t)
			path := r.loadConfigFile(tc.file, tc.env)
			r.seed("F1", tilestore.FlightOnGround, 2)
			res := r.run(nil, append([]string{"--flight", "F1"}, tc.flags...)...)
			if res.code != exitcode.OK {
				t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
			}
			var warn string
			for _, line := range strings.Split(res.stderr, "\n") {
				if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "upload.deadline") {
					warn = line
				}
			}
			want := "upload.deadline 45s (from " + tc.source(path) + ")"
			if !strings.Contains(warn, want) || !strings.Contains(warn, "upload.request_timeout 1m0s (from default)") {
				t.Fatalf("no warning saying %q and the request timeout's source:\n%s", want, res.stderr)
			}
			if tc.name != "flag" && strings.Contains(warn, "--deadline") {
				t.Errorf("the warning blames --deadline, which was not given: %s", warn)
			}
		})
	}
}
