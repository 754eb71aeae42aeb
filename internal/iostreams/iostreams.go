// Package iostreams holds a command's standard streams and the terminal
// decisions made from them. Commands write data to Out and diagnostics to
// ErrOut, and ask IsStdoutTTY/IsStderrTTY instead of probing file
// descriptors, so Test can stand in for a terminal or a pipe.
package iostreams

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/term"
)

// IOStreams is a command's stdin, stdout and stderr.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdoutTTY bool
	stderrTTY bool

	statusOnce sync.Once
	status     *StatusLine
	errWidth   func() int
}

// System returns the process's streams, with TTY flags from the real file
// descriptors.
func System() *IOStreams {
	return &IOStreams{
		In:        os.Stdin,
		Out:       os.Stdout,
		ErrOut:    os.Stderr,
		stdoutTTY: isTerminal(os.Stdout),
		stderrTTY: isTerminal(os.Stderr),
		errWidth:  terminalWidth(os.Stderr),
	}
}

// StatusLine is stderr's status line when stderr is a terminal, else nil.
// While it is in use, logs must reach stderr through LogWriter.
func (s *IOStreams) StatusLine() *StatusLine {
	if !s.stderrTTY {
		return nil
	}
	s.statusOnce.Do(func() { s.status = NewStatusLine(s.ErrOut, s.errWidth) })
	return s.status
}

// LogWriter is where log lines go: through the status line on a terminal
// (so they print above the progress display), stderr itself otherwise.
func (s *IOStreams) LogWriter() io.Writer {
	if sl := s.StatusLine(); sl != nil {
		return sl
	}
	return s.ErrOut
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// IsStdoutTTY reports whether Out is a terminal: tables for people there,
// and the same tables (without decoration) in a pipe.
func (s *IOStreams) IsStdoutTTY() bool { return s.stdoutTTY }

// IsStderrTTY reports whether ErrOut is a terminal: progress bars and
// console-style logs only there.
func (s *IOStreams) IsStderrTTY() bool { return s.stderrTTY }

// IsStdinTTY reports whether In is a terminal, so that a person can
// answer a confirmation there (off one, a command needs --yes).
func (s *IOStreams) IsStdinTTY() bool {
	f, ok := s.In.(*os.File)
	return ok && isTerminal(f)
}

// Confirm writes prompt to ErrOut and reports whether the line read from In
// is want (blanks around it ignored). The commands that destroy or move
// data ask a person this way, on a terminal (IsStdinTTY).
func (s *IOStreams) Confirm(prompt, want string) bool {
	fmt.Fprint(s.ErrOut, prompt)
	line, _ := bufio.NewReader(s.In).ReadString('\n')
	return strings.TrimSpace(line) == want
}

// SetStdoutTTY overrides the stdout decision (tests, --no-tty style flags).
func (s *IOStreams) SetStdoutTTY(v bool) { s.stdoutTTY = v }

// SetStderrTTY overrides the stderr decision.
func (s *IOStreams) SetStderrTTY(v bool) { s.stderrTTY = v }

// Test returns streams backed by buffers (stdin, stdout, stderr), not
// terminals.
func Test() (*IOStreams, *bytes.Buffer, *bytes.Buffer, *bytes.Buffer) {
	in, out, errOut := &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}
