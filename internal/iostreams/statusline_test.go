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
