package upload

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
)

func TestCPUProfileFlagWritesAProfileOfTheRunAndIsHidden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	ios, _, _, _ := iostreams.Test()
	ran := false
	cmd := NewCmdUploadPending(&factory.Factory{IOStreams: ios}, func(context.Context, *Options) error {
		ran = true
		return nil
	})
	cmd.SetArgs([]string{"--cpuprofile", path})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.ExecuteContext(context.Background()); err != nil || !ran {
		t.Fatalf("run: %v (ran %v)", err, ran)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("profile %s: %v, want a non-empty pprof file", path, err)
	}
	if strings.Contains(cmd.UsageString(), "cpuprofile") {
		t.Error("--cpuprofile shows in the help; it is for developers and stays hidden")
	}
}

func TestCPUProfileEnvIsUsedWhenTheFlagIsNotAndABadPathSaysWhereItCameFrom(t *testing.T) {
	env := func(k string) string {
		if k == cpuProfileEnv {
			return filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.prof")
		}
		return ""
	}
	_, err := startCPUProfile("", env)
	if err == nil || !strings.Contains(err.Error(), cpuProfileEnv) {
		t.Fatalf("err = %v, want one naming %s", err, cpuProfileEnv)
	}
}
