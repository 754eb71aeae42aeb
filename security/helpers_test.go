package security

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// cli is one tilectl installation: a database, a cache, an FDR file and the
// environment that points tilectl at them.
type cli struct {
	t       *testing.T
	bin     string
	dbURL   string
	cache   string
	fdr     string
	env     []string
	outputs []runResult // every run, for leak checks
}

func newCLI(t *testing.T, providerURL, token string) *cli {
	t.Helper()
	root := t.TempDir()
	c := &cli{t: t, bin: testbin.Tilectl(t), dbURL: pgtest.NewURL(t),
		cache: filepath.Join(root, "cache"), fdr: filepath.Join(root, "fdr", "fdr.ring"), env: testbin.Environ()}
	c.env = append(c.env,
		"TILECTL_DATABASE_URL="+c.dbURL,
		"TILECTL_CACHE_DIR="+c.cache,
		"TILECTL_FDR_PATH="+c.fdr,
		"TILECTL_PROVIDER_URL="+providerURL,
		"TILECTL_PROVIDER_TOKEN="+token,
	)
	return c
}

// runResult is how one tilectl run ended.
type runResult struct {
	args   []string
	exit   int
	stdout string
	stderr string
	took   time.Duration
	maxRSS int64 // bytes, from the kernel's accounting of the child
}

// run runs tilectl to completion, killing it after limit.
func (c *cli) run(limit time.Duration, args ...string) runResult {
	c.t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	took := testbin.RunFor(c.t, cmd, limit)
	r := runResult{args: args, exit: cmd.ProcessState.ExitCode(), stdout: stdout.String(),
		stderr: stderr.String(), took: took}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss * 1024 // Linux reports KiB
	}
	c.outputs = append(c.outputs, r)
	return r
}

// mustRun runs tilectl and fails the test unless it exits 0.
func (c *cli) mustRun(args ...string) runResult {
	c.t.Helper()
	r := c.run(2*time.Minute, args...)
	if r.exit != 0 {
		c.t.Fatalf("tilectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.exit, r.stdout, r.stderr)
	}
	return r
}

// importFlight writes n tiles, imports them as flight and lands it.
func (c *cli) importFlight(flight string, n int) {
	c.t.Helper()
	dir := c.t.TempDir()
	writeTiles(c.t, dir, n)
	c.mustRun("migrate", "up")
	c.mustRun("tiles", "import", "--flight", flight, dir)
	c.land(flight)
}

// land marks the flight on_ground, as the navigation system does.
func (c *cli) land(flight string) {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE flights SET state = 'on_ground' WHERE flight_id = $1`, flight); err != nil {
		c.t.Fatalf("land %s: %v", flight, err)
	}
}

// query runs one query returning a single integer.
func (c *cli) count(sql string, args ...any) int {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// writeTiles writes n valid 4x4 PNG tiles in z/x/y.png layout under dir.
func writeTiles(t *testing.T, dir string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		testbin.WriteTile(t, dir, i, 0)
	}
}
