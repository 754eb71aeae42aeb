package opsafety

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/provider/providertest"
)

var (
	buildOnce  sync.Once
	tilectlBin string
	buildErr   error
	buildDir   string
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
			tilectlBin = b
			return
		}
		buildDir, buildErr = os.MkdirTemp("", "tilectl-opsafety-bin-")
		if buildErr != nil {
			return
		}
		tilectlBin = filepath.Join(buildDir, "tilectl")
		cmd := exec.Command("go", "build", "-o", tilectlBin, "./cmd/tilectl")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/tilectl: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build tilectl: %v", buildErr)
	}
	return tilectlBin
}

// station is one operator's machine: a tilectl database, a configured
// (default) cache dir, an FDR file, and a provider.
type station struct {
	t     *testing.T
	bin   string
	dbURL string
	cache string
	fdr   string
	prov  *providertest.Provider
	env   []string
}

func newStation(t *testing.T, prov *providertest.Provider) *station {
	t.Helper()
	root := t.TempDir()
	s := &station{t: t, bin: binary(t), dbURL: pgtest.NewURL(t), cache: filepath.Join(root, "cache"),
		fdr: filepath.Join(root, "fdr.ring"), prov: prov}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TILECTL_") && !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "HOME=") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "HOME="+root, "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"TILECTL_DATABASE_URL="+s.dbURL, "TILECTL_CACHE_DIR="+s.cache, "TILECTL_FDR_PATH="+s.fdr,
		"TILECTL_PROVIDER_URL="+prov.URL, "TILECTL_PROVIDER_TOKEN="+providertest.Token)
	s.mustRun("migrate", "up")
	return s
}

type result struct {
	exit           int
	stdout, stderr string
}

func (s *station) run(args ...string) result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	if ctx.Err() != nil {
		s.t.Fatalf("tilectl %s: timed out", strings.Join(args, " "))
	}
	return result{exit: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func (s *station) mustRun(args ...string) result {
	s.t.Helper()
	r := s.run(args...)
	if r.exit != 0 {
		s.t.Fatalf("tilectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.exit, r.stdout, r.stderr)
	}
	return r
}

// importFlight writes n valid PNG tiles (z 10, x 0..n-1, y 7) into a new
// directory, imports it as flight with extra leading args, and lands the
// flight. It returns the directory (the aircraft's original).
func (s *station) importFlight(flight string, n int, extra ...string) string {
	s.t.Helper()
	dir := s.t.TempDir()
	for i := range n {
		writeTile(s.t, dir, i, uint8(i))
	}
	s.mustRun(append(extra, "tiles", "import", "--flight", flight, dir)...)
	return dir
}

// writeTile writes the 4x4 PNG tile 10/i/7 under dir, its pixels seeded by v.
func writeTile(t *testing.T, dir string, i int, v uint8) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 4, 4))
	img.Pix[0], img.Pix[1], img.Pix[2] = uint8(i), uint8(i>>8), v
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "10", strconv.Itoa(i), "7.png")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func tileID(flight string, i int) string { return fmt.Sprintf("%s-10-%d-7", flight, i) }

// blobPath is where the station's cache keeps tile 10/i/7 of flight.
func (s *station) blobPath(flight string, i int) string {
	return filepath.Join(s.cache, flight, "10", strconv.Itoa(i), "7.png")
}

type tileRow struct {
	Status   string
	Attempts int
}

// tiles reads every tile's status and attempts (the test's own view; the
// operator never needs SQL).
func (s *station) tiles(flight string) map[string]tileRow {
	s.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT tile_id, voting_status, upload_attempts FROM tiles WHERE flight_id = $1`, flight)
	out := map[string]tileRow{}
	var id string
	var r tileRow
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.Status, &r.Attempts}, func() error { out[id] = r; return nil }); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// heldByProvider is the set of tile IDs the provider holds.
func (s *station) heldByProvider() map[string]bool {
	s.t.Helper()
	held := map[string]bool{}
	for _, tl := range s.prov.Ledger(s.t).Tiles {
		held[tl.TileID] = true
	}
	return held
}

// uploadJSON runs upload-pending -o json and decodes its summary.
func (s *station) uploadJSON(args ...string) (result, map[string]any) {
	s.t.Helper()
	r := s.run(append([]string{"upload-pending", "-o", "json"}, args...)...)
	var sum map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
		s.t.Fatalf("upload-pending -o json printed no summary (exit %d): %v\nstdout: %s\nstderr: %s", r.exit, err, r.stdout, r.stderr)
	}
	return r, sum
}
