package e2e

import (
	"bytes"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/tilectl/tilectl/provider"
)

// screen replays terminal output the way a terminal shows it: "\r" goes to
// column 0, ESC[K erases to the end of the line, "\n" ends a line; other
// escape sequences (colours) are dropped. It keeps every line as it was
// when it scrolled up (lines), and every state a line had just before it
// was erased or ended (snapshots: what a person saw at some moment).
type screen struct {
	lines     []string
	snapshots []string
	cur       []rune
	col       int
}

func (s *screen) feed(b []byte) {
	r := []rune(string(b))
	for i := 0; i < len(r); i++ {
		switch c := r[i]; {
		case c == '\r':
			s.col = 0
		case c == '\n':
			s.snapshots = append(s.snapshots, string(s.cur))
			s.lines = append(s.lines, string(s.cur))
			s.cur, s.col = nil, 0
		case c == 0x1b && i+1 < len(r) && r[i+1] == '[':
			j := i + 2
			for j < len(r) && (r[j] < 0x40 || r[j] > 0x7e) {
				j++
			}
			if j < len(r) && r[j] == 'K' {
				s.snapshots = append(s.snapshots, string(s.cur))
				s.cur = s.cur[:min(s.col, len(s.cur))]
			}
			i = j
		default:
			if s.col < len(s.cur) {
				s.cur[s.col] = c
			} else {
				s.cur = append(s.cur, c)
			}
			s.col++
		}
	}
}

var (
	barMark = regexp.MustCompile(`\d+/\d+ tiles`)
	logMark = regexp.MustCompile(`\b(INF|WRN|ERR|DBG)\b`)
)

func TestOnATerminalLogsPrintAboveTheBarAndTheSummaryHasItsOwnLine(t *testing.T) {
	t.Parallel()
	prov := refProvider(t, noFaults, nil)
	s := newSite(t, prov.URL)
	ids := s.flight("pty1", 8)
	// Two tiles are always rejected: the run backs off once (3 s, long
	// enough to watch the countdown), then gives them up with an ERROR log.
	prov.Close()
	prov = refProvider(t, provider.FaultConfig{RejectTileIDs: ids[:2], Latency: 50 * time.Millisecond}, nil)
	s.env = append(s.env, "TILECTL_PROVIDER_URL="+prov.URL, "TILECTL_RETRY_BACKOFF_BASE=3s")

	cmd := s.command("upload-pending", "--flight", "pty1", "--batch-size", "2", "--concurrency", "1",
		"--max-in-call-retries", "1", "--max-per-tile-attempts", "2")
	raw := runOnTerminal(t, cmd, 200)
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("exit %d, want 3 (tiles given up); output:\n%q", code, raw.String())
	}

	var sc screen
	sc.feed(raw.Bytes())
	sc.lines = append(sc.lines, string(sc.cur))
	var sawLog, sawBar, sawGiveUp bool
	for _, snap := range sc.snapshots {
		log, bar := logMark.MatchString(snap), barMark.MatchString(snap)
		if log && bar {
			t.Errorf("a log line and the bar share a screen line: %q", snap)
		}
		sawLog, sawBar = sawLog || log, sawBar || bar
		sawGiveUp = sawGiveUp || strings.Contains(snap, "ERR")
	}
	if !sawLog || !sawBar || !sawGiveUp {
		t.Errorf("want logs (an ERR among them) and a bar on the terminal; saw log %v, bar %v, ERR %v", sawLog, sawBar, sawGiveUp)
	}
	var countdown []string
	for _, snap := range sc.snapshots {
		if m := regexp.MustCompile(`retrying in (\d+s) \(\d+ pending, \d+ rejected\)`).FindStringSubmatch(snap); m != nil {
			if len(countdown) == 0 || countdown[len(countdown)-1] != m[1] {
				countdown = append(countdown, m[1])
			}
		}
	}
	if len(countdown) < 2 || countdown[0] != "3s" {
		t.Errorf("backoff countdown shown as %v, want it to tick down from 3s", countdown)
	}
	summary := -1
	for i, l := range sc.lines {
		if strings.HasPrefix(l, "flight pty1: partial") {
			summary = i
		}
	}
	if screenText := strings.Join(sc.lines, "\n"); !strings.Contains(screenText, "deadline=30m0s") {
		t.Errorf("durations in logs carry no unit; screen:\n%s", screenText)
	}
	if summary < 0 {
		t.Fatalf("no summary line starting at column 0; screen:\n%s", strings.Join(sc.lines, "\n"))
	}
	if l := sc.lines[summary]; barMark.MatchString(l) || logMark.MatchString(l) {
		t.Errorf("summary shares its line: %q", l)
	}
}

// runOnTerminal runs cmd with a pseudo-terminal of cols columns as its
// stdin, stdout and stderr, waits up to 60 s for it to exit, and returns
// everything it wrote to the terminal.
func runOnTerminal(t *testing.T, cmd *exec.Cmd, cols uint16) *bytes.Buffer {
	t.Helper()
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var raw bytes.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&raw, tty) // ends with EIO when the child exits
		close(copied)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("%s did not finish in 60s", strings.Join(cmd.Args[1:], " "))
	}
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	return &raw
}
