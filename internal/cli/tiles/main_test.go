package tiles

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the launcher of BenchmarkImportProcess: with
// TILECTL_TILES_LAUNCH set to a JSON argv, the test binary runs that
// command and reports its peak RSS (see launch).
func TestMain(m *testing.M) {
	if argv := os.Getenv("TILECTL_TILES_LAUNCH"); argv != "" {
		os.Exit(launch(argv))
	}
	os.Exit(m.Run())
}

// launch runs argv (a JSON array) and prints to stderr, after its output,
// "launch: maxrss_kb=N launcher_hwm_kb=M elapsed_ns=T". A child's Maxrss
// counts the memory of the process it was started from (Go starts children
// sharing the parent's memory until exec), so the benchmark, whose own heap
// holds no less than the tiles it wrote, starts this small process, and
// this one starts tilectl: launcher_hwm_kb, this process's own peak, is the
// floor below which maxrss_kb says nothing.
func launch(argv string) int {
	var args []string
	if err := json.Unmarshal([]byte(argv), &args); err != nil || len(args) == 0 {
		fmt.Fprintf(os.Stderr, "launch: bad TILECTL_TILES_LAUNCH %q: %v\n", argv, err)
		return 2
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if cmd.ProcessState == nil {
		fmt.Fprintf(os.Stderr, "launch: %v\n", err)
		return 2
	}
	var maxKB int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxKB = ru.Maxrss // KiB on Linux
	}
	fmt.Fprintf(os.Stderr, "launch: maxrss_kb=%d launcher_hwm_kb=%d elapsed_ns=%d\n", maxKB, ownHWM(), took.Nanoseconds())
	return cmd.ProcessState.ExitCode()
}

// ownHWM is this process's peak resident set in KiB (VmHWM), 0 if unknown.
func ownHWM() int64 {
	st, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb
		}
	}
	return 0
}
