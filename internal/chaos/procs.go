package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildBinaries builds cmd/tilectl and cmd/tileprovider of the module that
// holds the current directory into dir and returns their paths.
func BuildBinaries(ctx context.Context, dir string) (tilectl, tileprovider string, err error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", "", err
	}
	tilectl = filepath.Join(dir, "tilectl")
	tileprovider = filepath.Join(dir, "tileprovider")
	for bin, pkg := range map[string]string{tilectl: "./cmd/tilectl", tileprovider: "./cmd/tileprovider"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return tilectl, tileprovider, nil
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find module root: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("find module root: not inside a Go module (run from the tilectl checkout)")
	}
	return filepath.Dir(mod), nil
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// providerProc is a running tileprovider.
type providerProc struct {
	cmd    *exec.Cmd
	base   string
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

func startProvider(ctx context.Context, bin string, args []string, base, token string) (*providerProc, error) {
	cmd := exec.Command(bin, args...)
	// The token goes in the environment: flags show up in ps.
	cmd.Env = append(os.Environ(), "TILEPROVIDER_TOKEN="+token)
	p := &providerProc{cmd: cmd, base: base, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.stderr
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start provider: %w", err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	if err := p.waitReady(ctx, token); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitReady polls the capabilities endpoint until it answers 200.
func (p *providerProc) waitReady(ctx context.Context, token string) error {
	deadline := time.Now().Add(20 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("provider exited before it was ready (%v):\n%s", p.err, tail(p.stderr.Bytes(), 2000))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/v1/capabilities", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("provider at %s not ready after 20s:\n%s", p.base, tail(p.stderr.Bytes(), 2000))
}

// stop asks the provider to exit and kills it if it does not within 5s.
func (p *providerProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// runPlan says what the soak does to one tilectl run while it runs.
type runPlan struct {
	killAfter  time.Duration // 0: let it finish
	breakAfter time.Duration // 0: leave its database connections alone
	// breakUntilHit retries the break every 20 ms until it terminates at
	// least one backend.
	breakUntilHit bool
	hardLimit     time.Duration // killed (and reported hung) past this
}

// runResult is how one tilectl run ended.
type runResult struct {
	exit   int // -1 when killed
	killed bool
	hung   bool
	breaks int // database backends terminated during the run
	stdout []byte
	stderr []byte
	took   time.Duration
}

// runTilectl runs tilectl with args and env, applying plan. breakConns is
// called at plan.breakAfter.
func runTilectl(ctx context.Context, bin string, env, args []string, plan runPlan,
	breakConns func(context.Context) (int, error)) (runResult, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return runResult{}, fmt.Errorf("start tilectl %s: %w", strings.Join(args, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var res runResult
	var killC, breakC <-chan time.Time
	if plan.killAfter > 0 {
		killC = time.After(plan.killAfter)
	}
	if plan.breakAfter > 0 {
		breakC = time.After(plan.breakAfter)
	}
	hard := time.After(plan.hardLimit)
	var waitErr error
loop:
	for {
		select {
		case waitErr = <-done:
			break loop
		case <-killC:
			res.killed = true
			_ = cmd.Process.Kill()
			killC = nil
		case <-breakC:
			n, err := breakConns(ctx)
			if err != nil {
				_ = cmd.Process.Kill()
				<-done
				return runResult{}, err
			}
			res.breaks += n
			breakC = nil
			if n == 0 && plan.breakUntilHit {
				breakC = time.After(20 * time.Millisecond)
			}
		case <-hard:
			res.hung = true
			_ = cmd.Process.Kill()
			hard = nil
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return runResult{}, ctx.Err()
		}
	}
	res.took = time.Since(start)
	res.stdout, res.stderr = stdout.Bytes(), stderr.Bytes()
	res.exit = cmd.ProcessState.ExitCode()
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return res, fmt.Errorf("wait for tilectl: %w", waitErr)
	}
	if res.killed && res.exit != -1 {
		// It finished before the signal landed: the run counts as a
		// normal one.
		res.killed = false
	}
	return res, nil
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Bytes returns a copy of what was written so far.
func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}
