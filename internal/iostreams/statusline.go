package iostreams

import (
	"bytes"
	"io"
	"os"
	"sync"
	"unicode/utf8"

	"golang.org/x/term"
)

// StatusLine owns a terminal's last line: log lines written through it
// print above the status text, which is then redrawn below them (the way
// rclone, cargo and pip keep logs and a progress bar from writing over each
// other). It is the one writer of the terminal while a command shows
// progress, so everything written to stderr in that time must go through
// it. It is safe for concurrent use.
type StatusLine struct {
	mu    sync.Mutex
	out   io.Writer
	width func() int
	text  string
	shown bool
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
		buf.WriteString(s.fit(s.text))
		s.shown = true
	} else {
		s.shown = false
	}
	if _, err := s.out.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Set replaces the status text and redraws it.
func (s *StatusLine) Set(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text = text
	_, _ = io.WriteString(s.out, clearLine+s.fit(text))
	s.shown = text != ""
}

// Clear removes the status line, leaving the cursor at the start of an
// empty line, so what follows (the summary) starts on its own line.
func (s *StatusLine) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text = ""
	if s.shown {
		_, _ = io.WriteString(s.out, clearLine)
		s.shown = false
	}
}

// fit cuts text to one column less than the terminal's width.
func (s *StatusLine) fit(text string) string {
	w := 80
	if s.width != nil {
		if n := s.width(); n > 0 {
			w = n
		}
	}
	if utf8.RuneCountInString(text) < w {
		return text
	}
	r := []rune(text)
	return string(r[:max(w-1, 0)])
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
