// Package teststation runs the real tilectl binary the way an operator's
// machine does, for tests.
package teststation

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider/providertest"
)

// Station is one operator's machine for a test that runs the real tilectl:
// a database of its own (migrated), a cache directory, a flight data
// recorder file and a provider, set through the environment of every
// command it runs, with HOME and XDG_CONFIG_HOME of its own so that no
// config file of the machine running the test is read.
type Station struct {
	T   *testing.T
	Bin string
	// DB is the station's database URL, Cache its cache directory, FDR
	// its flight data recorder file.
	DB, Cache, FDR string
	Env            []string
}

// New makes a station whose provider is at providerURL (with
// providertest's token) and runs migrate up on its database.
func New(t *testing.T, providerURL string) *Station {
	t.Helper()
	root := t.TempDir()
	s := &Station{T: t, Bin: testbin.Tilectl(t), DB: pgtest.NewURL(t), Cache: filepath.Join(root, "cache"),
		FDR: filepath.Join(root, "fdr.ring"), Env: testbin.Environ("XDG_", "HOME=")}
	s.Env = append(s.Env, "HOME="+root, "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"TILECTL_DATABASE_URL="+s.DB, "TILECTL_CACHE_DIR="+s.Cache, "TILECTL_FDR_PATH="+s.FDR,
		"TILECTL_PROVIDER_URL="+providerURL, "TILECTL_PROVIDER_TOKEN="+providertest.Token)
	s.MustRun("migrate", "up")
	return s
}

// Result is how a tilectl command the station ran ended.
type Result struct {
	Exit           int
	Stdout, Stderr string
}

// Run runs tilectl with args in the station's environment, for at most two
// minutes.
func (s *Station) Run(args ...string) Result {
	s.T.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(s.Bin, args...)
	cmd.Env = s.Env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if took := testbin.RunFor(s.T, cmd, 2*time.Minute); took >= 2*time.Minute {
		s.T.Fatalf("tilectl %s: timed out", strings.Join(args, " "))
	}
	return Result{Exit: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String()}
}

// MustRun is Run, failing the test unless tilectl exits 0.
func (s *Station) MustRun(args ...string) Result {
	s.T.Helper()
	r := s.Run(args...)
	if r.Exit != 0 {
		s.T.Fatalf("tilectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Exit, r.Stdout, r.Stderr)
	}
	return r
}
