package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

func TestHelpExitsZeroAndPrintsTheFlagsOnStdout(t *testing.T) {
	bin := testbin.Tileprovider(t)
	for _, arg := range []string{"--help", "-h"} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, arg)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		testbin.RunFor(t, cmd, time.Minute)
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("tileprovider %s: exit %d, want 0\nstderr: %s", arg, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "-listen") || !strings.Contains(stdout.String(), "-fault-rate") {
			t.Errorf("tileprovider %s: stdout does not list the flags:\n%s", arg, stdout.String())
		}
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--no-such-flag")
	cmd.Stderr = &stderr
	testbin.RunFor(t, cmd, time.Minute)
	if code := cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(stderr.String(), "no-such-flag") {
		t.Errorf("an unknown flag: exit %d, stderr %q; want a failure naming it", code, stderr.String())
	}
}
