// Package testbin builds the module's commands, cmd/tilectl and
// cmd/tileprovider, for tests that run them as real processes: each at most
// once per test binary, into a temporary directory that Main removes.
// TILECTL_BIN and TILEPROVIDER_BIN name prebuilt binaries instead.
//
// It is for tests and for the chaos soak (internal/chaos), which builds
// the same binaries; it does not import package testing, so the soak's
// command does not carry it.
package testbin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The version and commit stamped into the tilectl that Tilectl builds, so
// a test can check what --version prints.
const (
	Version = "1.2.3"
	Commit  = "e2e0c0mm1t"
)

// TB is the part of testing.TB the builders use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// buildTimeout bounds one build: a loaded machine may be slow to link.
const buildTimeout = 5 * time.Minute

var (
	dirOnce sync.Once
	dir     string
	dirErr  error

	tilectl = &binary{env: "TILECTL_BIN", pkg: "./cmd/tilectl", name: "tilectl",
		ldflags: "-X main.version=" + Version + " -X main.commit=" + Commit}
	tileprovider = &binary{env: "TILEPROVIDER_BIN", pkg: "./cmd/tileprovider", name: "tileprovider"}
)

// binary is one command, built at most once.
type binary struct {
	env, pkg, name, ldflags string

	once sync.Once
	path string
	err  error
}

func (b *binary) get(t TB) string {
	t.Helper()
	b.once.Do(func() {
		if p := os.Getenv(b.env); p != "" {
			b.path = p
			return
		}
		dirOnce.Do(func() { dir, dirErr = os.MkdirTemp("", "tilectl-testbin-") })
		if dirErr != nil {
			b.err = fmt.Errorf("make a directory for the test binaries: %w", dirErr)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		b.path = filepath.Join(dir, b.name)
		b.err = build(ctx, b.pkg, b.path, b.ldflags)
	})
	if b.err != nil {
		t.Fatalf("build %s (or name a prebuilt one in %s): %v", b.name, b.env, b.err)
	}
	return b.path
}

// Tilectl returns the path of cmd/tilectl, stamped with Version and Commit
// (or $TILECTL_BIN).
func Tilectl(t TB) string {
	t.Helper()
	return tilectl.get(t)
}

// Tileprovider returns the path of cmd/tileprovider (or $TILEPROVIDER_BIN).
func Tileprovider(t TB) string {
	t.Helper()
	return tileprovider.get(t)
}

// Main runs the tests of m (a *testing.M) and then removes the binaries
// built for them. Call it from TestMain.
func Main(m interface{ Run() int }) {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// Build compiles cmd/tilectl and cmd/tileprovider of the module that holds
// the current directory into dir and returns their paths.
func Build(ctx context.Context, dir string) (tilectlPath, tileproviderPath string, err error) {
	tilectlPath, tileproviderPath = filepath.Join(dir, "tilectl"), filepath.Join(dir, "tileprovider")
	if err := build(ctx, "./cmd/tilectl", tilectlPath, ""); err != nil {
		return "", "", err
	}
	if err := build(ctx, "./cmd/tileprovider", tileproviderPath, ""); err != nil {
		return "", "", err
	}
	return tilectlPath, tileproviderPath, nil
}

// build runs go build for pkg of the module that holds the current
// directory, writing out.
func build(ctx context.Context, pkg, out, ldflags string) error {
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	args := []string{"build", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
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

// Environ is os.Environ without the TILECTL_ variables (a test says which
// it wants) and without those that start with one of drop (say "HOME=" or
// "XDG_"), for a child whose own settings the test then appends.
func Environ(drop ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, p := range append(drop, "TILECTL_") {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

// FreeAddr is a loopback host:port that nothing listens on now: for a
// process the test starts there, or for a URL whose connections are
// refused.
func FreeAddr(t TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// RunFor starts cmd, kills it if it is still running after limit, and
// waits for it; cmd.ProcessState says how it ended. It returns how long
// the command ran.
func RunFor(t TB, cmd *exec.Cmd, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", filepath.Base(cmd.Path), err)
	}
	timer := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	_ = cmd.Wait()
	timer.Stop()
	return time.Since(start)
}
