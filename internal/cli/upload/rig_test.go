package upload

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
)

const testToken = "s3cr3t-T0KEN-never-printed-7f3a9c"

// instantClock records sleeps and returns at once (or with ctx's error).
type instantClock struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

func (c *instantClock) Now() time.Time { return time.Now() }

func (c *instantClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return ctx.Err()
}

// cmdRig is a real database, a blob cache, a fake provider and a config.
type cmdRig struct {
	t     *testing.T
	store *tilestore.Store
	blobs *tilestore.BlobStore
	cfg   config.Config
	prov  *providertest.Recorder
	srv   *httptest.Server
	dir   string
	clock *instantClock
}

func newCmdRig(t *testing.T, reject ...string) *cmdRig {
	t.Helper()
	pool, dbURL := pgtest.New(t)
	dir := t.TempDir()
	prov := providertest.StartRecorder(t, providertest.RecorderConfig{Token: testToken,
		Reject: func(id string) bool { return slices.Contains(reject, id) }})
	blobs, err := tilestore.NewBlobStore(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := *config.Default(func(string) string { return "" })
	cfg.DatabaseURL = dbURL
	cfg.CacheDir = blobs.Root()
	cfg.ProviderURL = prov.URL
	cfg.ProviderToken = config.NewSecret(testToken)
	cfg.FDRPath = filepath.Join(dir, "fdr.ring")
	return &cmdRig{t: t, store: tilestore.NewStore(pool), blobs: blobs, cfg: cfg, prov: prov, srv: prov.HTTP, dir: dir, clock: &instantClock{}}
}

// seed creates a flight with n tiles whose blobs are in the cache.
func (r *cmdRig) seed(flight string, state tilestore.FlightState, n int) []string {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.store.UpsertFlight(ctx, flight, state); err != nil {
		r.t.Fatal(err)
	}
	tiles := make([]tilestore.Tile, n)
	ids := make([]string, n)
	for i := range tiles {
		id := fmt.Sprintf("%s-t%03d", flight, i)
		rel := fmt.Sprintf("%s/18/%d/7.png", flight, i)
		size, sum, err := r.blobs.Put(rel, strings.NewReader("tile bytes of "+id))
		if err != nil {
			r.t.Fatal(err)
		}
		tiles[i] = tilestore.Tile{ID: id, FlightID: flight, Z: 18, X: int64(i), Y: 7, ContentType: "image/png",
			SizeBytes: size, SHA256: sum, BlobPath: rel, CapturedAt: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)}
		ids[i] = id
	}
	if _, err := r.store.InsertTiles(ctx, tiles); err != nil {
		r.t.Fatal(err)
	}
	return ids
}

type runResult struct {
	err            error
	code           int
	stdout, stderr string
}

// run runs upload-pending with the command-line flags args on the rig's
// dependencies and configuration; mod, if not nil, changes the parsed
// options (the flight, the output, a dependency) before the run.
func (r *cmdRig) run(mod func(o *Options), args ...string) runResult {
	r.t.Helper()
	ios, _, out, errOut := iostreams.Test()
	logs := &bytes.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := newCommand(ios, r.cfg, args, func(ctx context.Context, o *Options) error {
		// Workers log at once: bytes.Buffer is not safe for that.
		o.Logger = func() zerolog.Logger { return zerolog.New(zerolog.SyncWriter(logs)) }
		o.Store = func(context.Context) (*tilestore.Store, error) { return r.store, nil }
		o.Clock = r.clock
		o.NewTicker = func(time.Duration) (<-chan time.Time, func()) { return make(chan time.Time), func() {} }
		o.Version = "test"
		if mod != nil {
			mod(o)
			if err := o.validateFlags(); err != nil {
				return exitcode.UsageError(err)
			}
		}
		return uploadRun(ctx, o)
	})
	err := cmd.ExecuteContext(ctx)
	return runResult{err: err, code: exitcode.Code(err), stdout: out.String(), stderr: errOut.String() + logs.String()}
}

// newCommand builds upload-pending as the root command does, on a factory
// whose configuration is cfg with the flags in args applied by
// factory.ApplyConfigFlags, then completed and validated; runF replaces
// uploadRun.
func newCommand(ios *iostreams.IOStreams, cfg config.Config, args []string, runF func(context.Context, *Options) error) *cobra.Command {
	f := factory.NewWith(ios, func(string) (string, bool) { return "", false }, "test", "")
	f.Load = func() (*config.Config, error) { c := cfg; return &c, nil }
	cmd := NewCmdUploadPending(f, runF)
	f.ApplyFlags = func(c *config.Config) error { return factory.ApplyConfigFlags(c, cmd.Flags()) }
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args then
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceUsage = true
	return cmd
}

func (r *cmdRig) status(id string) string {
	r.t.Helper()
	var s string
	if err := r.store.Pool().QueryRow(context.Background(), `SELECT voting_status FROM tiles WHERE tile_id = $1`, id).Scan(&s); err != nil {
		r.t.Fatal(err)
	}
	return s
}
