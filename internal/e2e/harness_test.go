package e2e

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

const token = "e2e-T0KEN-never-printed-91c2"

func TestMain(m *testing.M) { testbin.Main(m) }

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
	s := &site{t: t, bin: testbin.Tilectl(t), dbURL: pgtest.NewURL(t), dir: t.TempDir(),
		env: testbin.Environ("XDG_CONFIG_HOME=", "HOME=")}
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
	took := testbin.RunFor(s.t, cmd, limit)
	return result{exit: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), took: took}
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
		testbin.WriteTile(s.t, dir, i, 0)
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
	return providertest.Start(t, func(c *provider.Config) {
		c.Token, c.Faults, c.BeforeRun = token, faults, beforeRun
	}).HTTP
}
