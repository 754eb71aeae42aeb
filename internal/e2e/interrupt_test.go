package e2e

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// watchedBuffer collects a child's output and lets a test wait until it
// holds some text, woken by each write rather than by polling.
type watchedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newWatchedBuffer() *watchedBuffer { return &watchedBuffer{changed: make(chan struct{})} }

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until the output satisfies ok, or limit passes.
func (w *watchedBuffer) waitFor(limit time.Duration, ok func(string) bool) bool {
	deadline := time.After(limit)
	for {
		w.mu.Lock()
		text, changed := w.buf.String(), w.changed
		w.mu.Unlock()
		if ok(text) {
			return true
		}
		select {
		case <-changed:
		case <-deadline:
			return false
		}
	}
}

// holdingProvider is the reference provider holding every batch it
// receives until release is closed: a link so slow that an interrupted run
// visibly waits for its batches. arrived gets one value per batch.
func holdingProvider(t *testing.T) (url string, arrived <-chan struct{}, release func()) {
	t.Helper()
	arrive := make(chan struct{}, 64)
	gate := make(chan struct{})
	var once sync.Once
	prov := refProvider(t, noFaults, func(string) {
		arrive <- struct{}{}
		<-gate
	})
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // runs before the server's Close, which waits for held batches
	return prov.URL, arrive, release
}

func TestAnInterruptIsAcknowledgedAtOnceWithWhatTheRunWaitsForAndReportedAsInterrupted(t *testing.T) {
	t.Parallel()
	const want = "interrupting: waiting for 2 batches on the wire ("
	for _, tc := range []struct {
		name     string
		sig      syscall.Signal
		code     int
		terminal bool
		again    string
	}{
		{"Ctrl-C on a terminal", syscall.SIGINT, 130, true, "Ctrl-C again to stop now; they resume on the next run)"},
		{"SIGTERM from a service manager, -o json", syscall.SIGTERM, 143, false, "SIGTERM again to stop now; they resume on the next run)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, arrived, release := holdingProvider(t)
			s := newSite(t, url)
			s.flight("int1", 8)
			args := []string{"upload-pending", "--flight", "int1", "--batch-size", "2", "--concurrency", "2"}
			if !tc.terminal {
				args = append(args, "-o", "json")
			}
			cmd := s.command(args...)
			out := newWatchedBuffer() // the terminal, or stderr
			var stdout bytes.Buffer
			copied := make(chan struct{})
			if tc.terminal {
				tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 250})
				if err != nil {
					t.Fatal(err)
				}
				defer tty.Close()
				go func() { _, _ = io.Copy(out, tty); close(copied) }() // ends with EIO when the child exits
			} else {
				cmd.Stdout, cmd.Stderr = &stdout, out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				close(copied)
			}
			waited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(waited) }()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-waited })

			for range 2 { // both batches are on the wire, held
				select {
				case <-arrived:
				case <-time.After(30 * time.Second):
					t.Fatalf("two batches did not reach the provider; output:\n%s", out.String())
				}
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			// Said at once, while the batches are still held: in the log,
			// and on a terminal on the status line too.
			said := out.waitFor(10*time.Second, func(text string) bool {
				var sc screen
				sc.feed([]byte(text))
				var log, bar bool
				for _, snap := range append(sc.snapshots, string(sc.cur)) {
					if strings.Contains(snap, want) && strings.Contains(snap, tc.again) {
						log = log || logMark.MatchString(snap) || strings.Contains(snap, `"level":"warn"`)
						bar = bar || barMark.MatchString(snap)
					}
				}
				return log && (bar || !tc.terminal)
			})
			if !said {
				t.Fatalf("no %q (log line%s) while the batches were held; output:\n%q", want+"..."+tc.again,
					map[bool]string{true: " and status line", false: ""}[tc.terminal], out.String())
			}
			release()
			select {
			case <-waited:
			case <-time.After(30 * time.Second):
				t.Fatal("tilectl did not stop after its batches were answered")
			}
			<-copied
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Fatalf("exit %d, want %d; output:\n%s", got, tc.code, out.String())
			}
			report := stdout.String()
			if tc.terminal {
				var sc screen
				sc.feed([]byte(out.String()))
				report = strings.Join(append(sc.lines, string(sc.cur)), "\n")
				if !strings.Contains(report, "flight int1: interrupted") {
					t.Errorf("the summary does not say interrupted:\n%s", report)
				}
			} else {
				obj := oneJSONObject(t, report)
				flights, _ := obj["flights"].([]any)
				if obj["outcome"] != "interrupted" || len(flights) != 1 {
					t.Fatalf("outcome %v, %d flights; want interrupted, 1:\n%s", obj["outcome"], len(flights), report)
				}
				if f := flights[0].(map[string]any); f["outcome"] != "interrupted" {
					t.Errorf("flights[0].outcome %v, want interrupted", f["outcome"])
				}
			}
			bads := []string{"failure", "context canceled"}
			if !tc.terminal {
				bads[0] = `"failure"` // not local_failures
			}
			for _, bad := range bads {
				if strings.Contains(report, bad) {
					t.Errorf("the report of an interrupted run says %q:\n%s", bad, report)
				}
			}
		})
	}
}
