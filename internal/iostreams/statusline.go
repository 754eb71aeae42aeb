package iostreams

import (
	"bytes"
	"io"
	"os"
	"sync"

	"golang.org/x/term"
)

// StatusLine owns a terminal's last line: log lines written through it
// print above the status text, which is then redrawn below them (the way
// rclone, cargo and pip keep logs and a progress bar from writing over each
// other). It is the one writer of the terminal while a command shows
// progress, so everything written to stderr in that time must go through
// it. It is safe for concurrent use.
type StatusLine struct {
	mu     sync.Mutex
	out    io.Writer
	width  func() int
	text   string
	fields []Field // set by SetFields: fitted to the width at each draw
	shown  bool
}

// Control sequences: carriage return, and erase to the end of the line.
const clearLine = "\r\x1b[K"

// NewStatusLine draws on out; width reports the terminal's columns (the
// status is cut to fit, so it never wraps onto a second line that a
// redraw could not erase).
func NewStatusLine(out io.Writer, width func() int) *StatusLine {
	return &StatusLine{out: out, width: width}
}

// Write prints p (whole log lines) above the status line.
func (s *StatusLine) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf bytes.Buffer
	if s.shown {
		buf.WriteString(clearLine)
	}
	buf.Write(p)
	if len(p) > 0 && p[len(p)-1] != '\n' {
		buf.WriteByte('\n') // a status never shares a line with a log
	}
	if s.text != "" {
		buf.WriteString(s.render())
		s.shown = true
	} else {
		s.shown = false
	}
	if _, err := s.out.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Set replaces the status text and redraws it, cut to the width.
func (s *StatusLine) Set(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text, s.fields = text, nil
	_, _ = io.WriteString(s.out, clearLine+s.render())
	s.shown = text != ""
}

// SetFields replaces the status with fields and redraws it: on a narrow
// terminal the fields of least priority are dropped (Fit).
func (s *StatusLine) SetFields(fields []Field) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fields = fields
	s.text = Fit(fields, 1<<20)
	_, _ = io.WriteString(s.out, clearLine+s.render())
	s.shown = s.text != ""
}

// render is the status as drawn at the terminal's width now.
func (s *StatusLine) render() string {
	if s.fields != nil {
		return Fit(s.fields, s.columns())
	}
	return cut(s.text, s.columns())
}

// Clear removes the status line, leaving the cursor at the start of an
// empty line, so what follows (the summary) starts on its own line.
func (s *StatusLine) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text, s.fields = "", nil
	if s.shown {
		_, _ = io.WriteString(s.out, clearLine)
		s.shown = false
	}
}

// columns is the terminal's width, 80 when it cannot tell.
func (s *StatusLine) columns() int {
	if s.width != nil {
		if n := s.width(); n > 0 {
			return n
		}
	}
	return 80
}

// terminalWidth reads f's columns, 80 when it cannot.
func terminalWidth(f *os.File) func() int {
	return func() int {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			return w
		}
		return 80
	}
}
