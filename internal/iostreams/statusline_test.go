package iostreams

import (
	"bytes"
	"strings"
	"testing"
)

func TestStatusLineRedrawsBelowEveryLogLineAndFitsTheWidth(t *testing.T) {
	var out bytes.Buffer
	sl := NewStatusLine(&out, func() int { return 10 })
	sl.Set("3/48 tiles uploading")
	if _, err := sl.Write([]byte("INF a log line\n")); err != nil {
		t.Fatal(err)
	}
	sl.Clear()
	want := "\r\x1b[K3/48 tile" + // cut to width-1: never wraps
		"\r\x1b[KINF a log line\n3/48 tile" + // erased, logged, redrawn below
		"\r\x1b[K" // cleared for the summary
	if got := out.String(); got != want {
		t.Fatalf("terminal got %q\nwant        %q", got, want)
	}
	out.Reset()
	_, _ = sl.Write([]byte("no newline"))
	if got := out.String(); !strings.HasSuffix(got, "\n") || strings.Contains(got, "\r") {
		t.Fatalf("with no status shown, a log line is written as is, ended: %q", got)
	}
}

func TestFitDropsFieldsByPriorityInsteadOfCutting(t *testing.T) {
	fields := []Field{
		{Text: "flight-2026-11-25-north", Short: "flight-2…", Priority: 6},
		{Text: "[=====>    ]", Priority: 4},
		{Text: "120/480 tiles", Priority: 1},
		{Text: "12.0 MiB/48.0 MiB", Priority: 5},
		{Text: "1.9 MiB/s", Priority: 2},
		{Text: "limit 2.0 MiB/s", Priority: 3},
		{Text: "ETA 18s", Priority: 0},
	}
	for _, tc := range []struct {
		width int
		want  string
	}{
		{120, "flight-2026-11-25-north  [=====>    ]  120/480 tiles  12.0 MiB/48.0 MiB  1.9 MiB/s  limit 2.0 MiB/s  ETA 18s"},
		{100, "flight-2…  [=====>    ]  120/480 tiles  12.0 MiB/48.0 MiB  1.9 MiB/s  limit 2.0 MiB/s  ETA 18s"},
		{80, "[=====>    ]  120/480 tiles  1.9 MiB/s  limit 2.0 MiB/s  ETA 18s"},
		{60, "120/480 tiles  1.9 MiB/s  limit 2.0 MiB/s  ETA 18s"},
		{40, "120/480 tiles  1.9 MiB/s  ETA 18s"},
		{24, "120/480 tiles  ETA 18s"},
		{20, "ETA 18s"},
		{10, "ETA 18s"},
	} {
		got := Fit(fields, tc.width)
		if got != tc.want {
			t.Errorf("width %d:\n got %q\nwant %q", tc.width, got, tc.want)
		}
		if len([]rune(got)) >= tc.width {
			t.Errorf("width %d: %d columns, wider than the terminal allows", tc.width, len([]rune(got)))
		}
	}
}
