package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// On a terminal of any width from 40 columns, the status line keeps what
// matters (tiles done, the ETA) and drops the rest by priority, never
// wider than the terminal: at 120 everything shows, the limit and the
// flight ID included.
func TestOnANarrowTerminalTheStatusLineDropsFieldsByPriority(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cols int
		want []string // regexps every width must show at some moment
		not  []string // and must never show
	}{
		{40, []string{`\d+/24 tiles`, `ETA \d`}, []string{`\[`, `nar-40`}},
		{60, []string{`\d+/24 tiles`, `ETA \d`, `B/s`}, []string{`nar-60`}},
		{80, []string{`\d+/24 tiles`, `ETA \d`, `B/s`, `limit 1\.5 KiB/s`}, nil},
		{120, []string{`nar-120`, `\[[= >]{20}\]`, `\d+/24 tiles`, `ETA \d`, `B/s`, `limit 1\.5 KiB/s`}, nil},
	} {
		t.Run(fmt.Sprint(tc.cols), func(t *testing.T) {
			t.Parallel()
			prov := refProvider(t, noFaults, nil)
			s := newSite(t, prov.URL)
			flight := fmt.Sprintf("nar-%d", tc.cols)
			s.flight(flight, 24)
			cmd := s.command("upload-pending", "--flight", flight, "--bwlimit", "1.5k", "--batch-size", "3", "--concurrency", "2")
			raw := runOnTerminal(t, cmd, uint16(tc.cols))
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("exit %d; output:\n%q", code, raw.String())
			}
			var sc screen
			sc.feed(raw.Bytes())
			var status []string
			for _, snap := range sc.snapshots {
				if barMark.MatchString(snap) && !logMark.MatchString(snap) {
					status = append(status, snap)
					if n := len([]rune(snap)); n >= tc.cols {
						t.Errorf("a status line of %d columns on a terminal of %d: %q", n, tc.cols, snap)
					}
				}
			}
			all := strings.Join(status, "\n")
			for _, w := range tc.want {
				if !regexp.MustCompile(w).MatchString(all) {
					t.Errorf("no status line at %d columns shows %s; they were:\n%s", tc.cols, w, all)
				}
			}
			for _, n := range tc.not {
				if regexp.MustCompile(n).MatchString(all) {
					t.Errorf("a status line at %d columns shows %s, which should have been dropped:\n%s", tc.cols, n, all)
				}
			}
		})
	}
}
