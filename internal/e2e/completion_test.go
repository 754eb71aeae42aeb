package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/tilectl/tilectl/internal/testbin"
)

// bashSession is an interactive bash on a pseudo-terminal, started with
// neither rc files nor profile (so the bash-completion package is loaded
// only if the test sources it), with the test's tilectl first on PATH.
type bashSession struct {
	t      *testing.T
	tty    *os.File
	mu     sync.Mutex
	out    bytes.Buffer
	more   chan struct{} // receives after each read from the terminal
	marker int
}

func startBash(t *testing.T) *bashSession {
	t.Helper()
	bin := testbin.Tilectl(t)
	cmd := exec.Command("bash", "--norc", "--noprofile", "-i")
	cmd.Env = append(testbin.Environ("HOME=", "XDG_", "PATH=", "BASH", "PS1=", "INPUTRC=", "TERM="),
		"HOME="+t.TempDir(),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"PS1=$ ", "INPUTRC=/dev/null", "TERM=dumb",
		// Completing a flag value may ask the database; nothing listens here.
		"TILECTL_DATABASE_URL=postgres://postgres@127.0.0.1:1/none?sslmode=disable")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatalf("start bash on a pseudo-terminal: %v", err)
	}
	b := &bashSession{t: t, tty: tty, more: make(chan struct{}, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			b.mu.Lock()
			b.out.Write(buf[:n])
			b.mu.Unlock()
			select {
			case b.more <- struct{}{}:
			default:
			}
			if err != nil {
				return // EIO once bash exits
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		tty.Close()
	})
	return b
}

// typeText sends keys to bash as a person types them.
func (b *bashSession) typeText(keys string) {
	b.t.Helper()
	if _, err := b.tty.WriteString(keys); err != nil {
		b.t.Fatalf("type %q: %v", keys, err)
	}
}

// waitFor waits until everything in want has appeared on the terminal
// since from (an offset in the output) and returns the output from there.
func (b *bashSession) waitFor(from int, want ...string) string {
	b.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		b.mu.Lock()
		seen := b.out.String()[from:]
		b.mu.Unlock()
		all := true
		for _, w := range want {
			all = all && strings.Contains(seen, w)
		}
		if all {
			return seen
		}
		select {
		case <-b.more:
		case <-deadline:
			b.t.Fatalf("bash did not show %q within 30s; terminal:\n%s", want, seen)
		}
	}
}

// run types a command line and waits for its run to end, by a marker that
// only the shell's arithmetic prints (the typed line echoes only the
// expression).
func (b *bashSession) run(line string) {
	b.t.Helper()
	b.marker++
	from := b.offset()
	b.typeText(fmt.Sprintf("%s; echo done-$((%d+1))\n", line, b.marker))
	b.waitFor(from, fmt.Sprintf("done-%d", b.marker+1))
}

func (b *bashSession) offset() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.Len()
}

// complete types partial, presses TAB the number of times given, waits for
// want, and clears the line unrun (Ctrl-U).
func (b *bashSession) complete(partial string, tabs int, want ...string) {
	b.t.Helper()
	from := b.offset()
	b.typeText(partial + strings.Repeat("\t", tabs))
	b.waitFor(from, want...)
	b.typeText("\x15")
	b.run(":")
}

// completeTilectl sources `tilectl completion bash` after prelude and
// completes command names, flag values and --flag=value words by TAB.
func completeTilectl(t *testing.T, prelude string) {
	b := startBash(t)
	if prelude != "" {
		b.run(prelude)
	}
	b.run("source <(tilectl completion bash)")
	b.complete("tilectl upl", 1, "tilectl upload-pending ")
	b.complete("tilectl status -o ", 2, "json", "text")
	b.complete("tilectl status --output=", 2, "json", "text")
	b.complete("tilectl tiles import --state=on_", 1, "--state=on_ground ")
	b.complete("tilectl fdr ta", 1, "tilectl fdr tail ")
	b.typeText("exit\n")

	b.mu.Lock()
	screen := b.out.String()
	b.mu.Unlock()
	for _, bad := range []string{"command not found", "compopt:", "syntax error", "line "} {
		if strings.Contains(screen, bad) {
			t.Errorf("the terminal shows %q:\n%s", bad, screen)
		}
	}
}

func TestBashCompletionWorksWithoutTheBashCompletionPackage(t *testing.T) {
	t.Parallel()
	completeTilectl(t, "declare -F _init_completion >/dev/null && exit 7") // bash-completion must not be loaded
}

// The same completions where the bash-completion package is loaded: the
// script then splits words with its _init_completion.
func TestBashCompletionWorksWithTheBashCompletionPackage(t *testing.T) {
	t.Parallel()
	const pkg = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(pkg); err != nil {
		t.Fatalf("the bash-completion package is not installed (%s): apt-get install bash-completion (make test installs it)", pkg)
	}
	completeTilectl(t, "source "+pkg+" && declare -F _init_completion >/dev/null || exit 7")
}

// zsh and fish completion scripts come from cobra as they are; each must
// at least parse in its shell.
func TestZshAndFishCompletionScriptsParse(t *testing.T) {
	t.Parallel()
	bin := testbin.Tilectl(t)
	for _, sh := range []struct{ name, checkFlag string }{{"zsh", "-n"}, {"fish", "--no-execute"}} {
		t.Run(sh.name, func(t *testing.T) {
			out, err := exec.Command(bin, "completion", sh.name).Output()
			if err != nil {
				t.Fatalf("tilectl completion %s: %v", sh.name, err)
			}
			if !bytes.Contains(out, []byte("tilectl")) {
				t.Fatalf("tilectl completion %s printed %d bytes without the word tilectl", sh.name, len(out))
			}
			shell, err := exec.LookPath(sh.name)
			if err != nil {
				t.Fatalf("%s is not installed, so its completion script cannot be parsed: apt-get install %s (make test installs it)", sh.name, sh.name)
			}
			file := filepath.Join(t.TempDir(), "tilectl."+sh.name)
			if err := os.WriteFile(file, out, 0o600); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command(shell, sh.checkFlag, file).CombinedOutput(); err != nil {
				t.Errorf("%s %s on the completion script: %v\n%s", sh.name, sh.checkFlag, err, b)
			}
		})
	}
}
