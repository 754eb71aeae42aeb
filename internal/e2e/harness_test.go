package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/provider"
)

const token = "e2e-T0KEN-never-printed-91c2"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds cmd/tilectl once per test binary (TILECTL_BIN names a
// prebuilt one).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if b := os.Getenv("TILECTL_BIN"); b != "" {
			binPath = b
			return
		}
		buildDir, buildErr = os.MkdirTemp("", "tilectl-e2e-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "tilectl")
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version=1.2.3 -X main.commit=e2e0c0mm1t", "-o", binPath, "./cmd/tilectl")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build tilectl: %v", buildErr)
	}
	return binPath
}

// site is one tilectl installation: a database, a cache and the
// environment that points the binary at them and at a provider.
type site struct {
	t     *testing.T
	bin   string
	dbURL string
	dir   string
	env   []string
}

func newSite(t *testing.T, providerURL string) *site {
	t.Helper()
	s := &site{t: t, bin: binary(t), dbURL: pgtest.NewURL(t), dir: t.TempDir()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TILECTL_") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") && !strings.HasPrefix(kv, "HOME=") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env,
		"HOME="+s.dir, // no stray ~/.config/tilectl/config.yaml
		"TILECTL_DATABASE_URL="+s.dbURL,
		"TILECTL_CACHE_DIR="+filepath.Join(s.dir, "cache"),
		"TILECTL_PROVIDER_URL="+providerURL,
		"TILECTL_PROVIDER_TOKEN="+token,
	)
	return s
}

type result struct {
	exit           int
	stdout, stderr string
	took           time.Duration
}

func (s *site) command(args ...string) *exec.Cmd {
	cmd := exec.Command(s.bin, args...)
	cmd.Env = s.env
	return cmd
}

// run runs tilectl to completion, killing it after limit.
func (s *site) run(limit time.Duration, args ...string) result {
	s.t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := s.command(args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start tilectl: %v", err)
	}
	timer := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	_ = cmd.Wait()
	timer.Stop()
	return result{exit: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
}

func (s *site) mustRun(args ...string) result {
	s.t.Helper()
	r := s.run(time.Minute, args...)
	if r.exit != 0 {
		s.t.Fatalf("tilectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.exit, r.stdout, r.stderr)
	}
	return r
}

// flight imports n small PNG tiles as an on_ground flight and returns
// their tile IDs in order.
func (s *site) flight(id string, n int) []string {
	s.t.Helper()
	dir := filepath.Join(s.t.TempDir(), id)
	for i := range n {
		img := image.NewGray(image.Rect(0, 0, 4, 4))
		img.Pix[0], img.Pix[1] = uint8(i), uint8(i>>8)
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			s.t.Fatal(err)
		}
		p := filepath.Join(dir, "10", strconv.Itoa(i), "7.png")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			s.t.Fatal(err)
		}
	}
	s.mustRun("tiles", "import", "--flight", id, "--state", "on_ground", dir)
	var ids []string
	s.query(func(conn *pgx.Conn) error {
		rows, err := conn.Query(context.Background(), `SELECT tile_id FROM tiles WHERE flight_id = $1 ORDER BY tile_id`, id)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return ids
}

func (s *site) query(fn func(conn *pgx.Conn) error) {
	s.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := fn(conn); err != nil {
		s.t.Fatal(err)
	}
}

// refProvider serves the reference provider in-process, on a free port.
func refProvider(t *testing.T, faults provider.FaultConfig, beforeRun func(opID string)) *httptest.Server {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := provider.EnsureSchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	srv, err := provider.New(provider.Config{Pool: pool, StorageDir: t.TempDir(), Token: token,
		Faults: faults, BeforeRun: beforeRun, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs
}
