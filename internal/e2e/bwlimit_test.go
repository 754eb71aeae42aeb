package e2e

import (
	"bufio"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGUSR2 toggles a running upload-pending's bandwidth limit off and on
// again, as rclone's does: the log says so, the progress lines carry the
// limit in force, and the run, freed of its limit, finishes with exit 0.
func TestSIGUSR2TogglesTheBandwidthLimitOfARunningUpload(t *testing.T) {
	t.Parallel()
	prov := refProvider(t, noFaults, nil)
	s := newSite(t, prov.URL)
	s.flight("usr2", 40)
	// At 1 KiB/s the flight's bodies (about 12 KiB) take over 10 s.
	cmd := s.command("upload-pending", "--flight", "usr2", "--bwlimit", "1k", "--batch-size", "4",
		"--concurrency", "1", "--progress-interval", "200ms", "-o", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	waitFor := func(what string, ok func(m map[string]any) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case m, open := <-lines:
				if !open {
					t.Fatalf("tilectl ended before %s", what)
				}
				if ok(m) {
					return
				}
			case <-deadline:
				_ = cmd.Process.Kill()
				t.Fatalf("no %s in 20 s", what)
			}
		}
	}
	progress := func(limit string) func(m map[string]any) bool {
		return func(m map[string]any) bool { return m["message"] == "upload progress" && m["bwlimit"] == limit }
	}
	waitFor("progress line at 1.0 KiB/s", progress("1.0 KiB/s"))
	toggle := func() {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
	}
	message := func(prefix string) func(m map[string]any) bool {
		return func(m map[string]any) bool { s, _ := m["message"].(string); return strings.HasPrefix(s, prefix) }
	}
	toggle()
	waitFor("log of the limit going off", message("SIGUSR2: bandwidth limit off"))
	toggle()
	waitFor("log of the limit back on", message("SIGUSR2: bandwidth limit back on"))
	waitFor("progress line at 1.0 KiB/s again", progress("1.0 KiB/s"))
	toggle()
	waitFor("log of the limit going off again", message("SIGUSR2: bandwidth limit off"))
	off := time.Now()
	for range lines { // drain until the process closes stderr
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("upload-pending after SIGUSR2: %v (exit %d), want exit 0", err, cmd.ProcessState.ExitCode())
	}
	if took := time.Since(off); took > 8*time.Second {
		t.Errorf("with the limit off the rest took %s, as if it were still on", took)
	}
}
