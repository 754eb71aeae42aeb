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
	"strings"
	"sync"
	"syscall"
	"time"
)

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
	// bin and args start it again on the same port and storage.
	bin   string
	args  []string
	token string
}

func startProvider(ctx context.Context, bin string, args []string, base, token string) (*providerProc, error) {
	var last error
	// A restart may find the database still coming back from its own
	// restart: the provider then exits at once, and is started again.
	for attempt := 0; attempt < 20; attempt++ {
		p, err := startProviderOnce(ctx, bin, args, base, token)
		if err == nil || ctx.Err() != nil {
			return p, err
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	return nil, last
}

// crashAndRestart SIGKILLs the provider mid-whatever-it-is-doing and starts
// a new one with the same arguments (same port, database and storage).
func (p *providerProc) crashAndRestart(ctx context.Context) (*providerProc, error) {
	_ = p.cmd.Process.Kill()
	<-p.done
	return startProvider(ctx, p.bin, p.args, p.base, p.token)
}

func startProviderOnce(ctx context.Context, bin string, args []string, base, token string) (*providerProc, error) {
	cmd := exec.Command(bin, args...)
	// The token goes in the environment: flags show up in ps.
	cmd.Env = append(os.Environ(), "TILEPROVIDER_TOKEN="+token)
	p := &providerProc{cmd: cmd, base: base, stderr: &syncBuffer{}, done: make(chan struct{}), bin: bin, args: args, token: token}
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
	// dbRestartAfter restarts the database (-m immediate) and
	// providerKillAfter SIGKILLs and restarts the provider, while the run
	// goes on; 0: not in this run.
	dbRestartAfter, providerKillAfter time.Duration
	// breakUntilHit retries the break every 20 ms until it terminates at
	// least one backend.
	breakUntilHit bool
	hardLimit     time.Duration // killed (and reported hung) past this
}

// runHooks are what the plan's faults do. restartDB and killProvider get
// a context that ends with the run: they may wait for a better moment
// (a batch running at the provider) and report whether they acted.
type runHooks struct {
	breakConns   func(context.Context) (int, error)
	restartDB    func(run context.Context) (hit, error)
	killProvider func(run context.Context) (hit, error)
}

// hit says whether a fault landed while the run was going, and whether it
// caught a batch executing at the provider.
type hit struct{ landed, midBatch bool }

// runResult is how one tilectl run ended.
type runResult struct {
	exit   int // -1 when killed
	killed bool
	hung   bool
	breaks int // database backends terminated during the run
	stdout []byte
	stderr []byte
	took   time.Duration

	// dbRestarts and providerKills landed while the run was going; the
	// midBatch ones while a batch was executing at the provider.
	dbRestarts, providerKills         int
	dbRestartsMidBatch, killsMidBatch int
}

// runTilectl runs tilectl with args and env, applying plan through hooks.
// A database restart or provider crash runs beside the run; runTilectl
// returns when both the run and they have finished.
func runTilectl(ctx context.Context, bin string, env, args []string, plan runPlan, hooks runHooks) (runResult, error) {
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
	var killC, breakC, dbC, provC <-chan time.Time
	if plan.killAfter > 0 {
		killC = time.After(plan.killAfter)
	}
	if plan.breakAfter > 0 {
		breakC = time.After(plan.breakAfter)
	}
	if plan.dbRestartAfter > 0 {
		dbC = time.After(plan.dbRestartAfter)
	}
	if plan.providerKillAfter > 0 {
		provC = time.After(plan.providerKillAfter)
	}
	type hookResult struct {
		db  bool
		hit hit
		err error
	}
	runCtx, endRun := context.WithCancel(ctx)
	defer endRun()
	hookDone := make(chan hookResult, 2)
	pending := 0
	var hookErr error
	took := func(r hookResult) {
		switch {
		case r.err != nil:
			if hookErr == nil {
				hookErr = r.err
			}
		case r.db && r.hit.landed:
			res.dbRestarts++
			if r.hit.midBatch {
				res.dbRestartsMidBatch++
			}
		case r.hit.landed:
			res.providerKills++
			if r.hit.midBatch {
				res.killsMidBatch++
			}
		}
	}
	waitHooks := func() {
		endRun()
		for ; pending > 0; pending-- {
			took(<-hookDone)
		}
	}
	hard := time.After(plan.hardLimit)
	var waitErr error
loop:
	for {
		select {
		case waitErr = <-done:
			break loop
		case <-dbC:
			dbC = nil
			pending++
			go func() { h, err := hooks.restartDB(runCtx); hookDone <- hookResult{db: true, hit: h, err: err} }()
		case <-provC:
			provC = nil
			pending++
			go func() { h, err := hooks.killProvider(runCtx); hookDone <- hookResult{hit: h, err: err} }()
		case r := <-hookDone:
			pending--
			took(r)
		case <-killC:
			res.killed = true
			_ = cmd.Process.Kill()
			killC = nil
		case <-breakC:
			// A break that cannot connect (the database is restarting)
			// terminated nothing.
			n, _ := hooks.breakConns(ctx)
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
			waitHooks()
			return runResult{}, ctx.Err()
		}
	}
	res.took = time.Since(start)
	waitHooks()
	if hookErr != nil {
		return res, hookErr
	}
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
