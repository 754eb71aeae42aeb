// Package chaos is a seeded soak of tilectl against the reference provider:
// it runs the real binaries, injects provider faults, SIGKILLs tilectl at
// random moments, breaks its database connections, restarts the database
// (a throwaway cluster it starts itself) and SIGKILLs and restarts the
// provider while batches run, then checks from
// the provider's own records, tilectl's database and its FDR file that no
// tile was stored twice, lost, or counted wrongly.
//
// It promises: the same Config.Seed replays the same flights, faults, kill
// and break schedule (timing-dependent interleavings aside); every
// violation is reported with what was seen; and the throwaway cluster it
// starts is stopped and deleted when it ends.
package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tilectl/tilectl/internal/testbin"
)

// Config tunes a soak. The zero value of each field means its default.
type Config struct {
	// Seed drives every random choice. Default: 1.
	Seed uint64
	// Rounds is how many flights are soaked. Default: 3.
	Rounds int
	// Tiles is how many tiles each round's flight has. Default: 60.
	Tiles int
	// FaultRate is the provider's --fault-rate. Default: 0.3; negative
	// means 0.
	FaultRate float64
	// MaxRunsPerRound bounds the upload-pending runs of one round; needing
	// more is a violation. Default: 40.
	MaxRunsPerRound int
	// TilectlBin and ProviderBin are the binaries; empty means build them.
	TilectlBin, ProviderBin string
	// WorkDir holds flights, the cache, the FDR and provider storage.
	// Default: a temporary directory, removed at the end.
	WorkDir string
	// Log receives progress lines. Default: io.Discard.
	Log io.Writer
}

func (c *Config) defaults() {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.Tiles <= 0 {
		c.Tiles = 60
	}
	if c.FaultRate == 0 {
		c.FaultRate = 0.3
	} else if c.FaultRate < 0 {
		c.FaultRate = 0
	}
	if c.MaxRunsPerRound <= 0 {
		c.MaxRunsPerRound = 40
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Report is what a soak did and found.
type Report struct {
	Seed       uint64
	Rounds     int
	Tiles      int
	Runs       int
	Kills      int
	DBBreaks   int         // tilectl database backends terminated mid-run
	ExitCodes  map[int]int // exit code -> runs (killed runs not included)
	Faults     map[string]int
	Replays    int            // answers the provider replayed for a known key
	Checked    map[string]int // invariant -> evaluations
	Violations []string
	Uploaded   int
	GivenUp    int
	Took       time.Duration
	AbortedIn  int // the round the soak stopped in on an error; 0 when it ran to the end
	// SequencedRounds ran upload-pending with a client ID of their own
	// (strict client sequencing, --concurrency 1).
	SequencedRounds int
	// RoundsWithDBRestart and RoundsWithProviderCrash count the rounds in
	// which that fault landed while a run was going.
	RoundsWithDBRestart, RoundsWithProviderCrash int

	// DBRestarts and ProviderKills landed while a run was going; the
	// MidBatch ones while a batch was executing at the provider.
	DBRestarts, DBRestartsMidBatch       int
	ProviderKills, ProviderKillsMidBatch int
}

// Run soaks tilectl as cfg says. It returns an error when the soak could
// not run; violations are in the report, not in the error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	start := time.Now()
	rep := &Report{Seed: cfg.Seed, Rounds: cfg.Rounds, Tiles: cfg.Tiles,
		ExitCodes: map[int]int{}, Faults: map[string]int{}, Checked: map[string]int{}}
	if cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "tilechaos-")
		if err != nil {
			return nil, fmt.Errorf("make work directory: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.WorkDir = dir
	}
	if cfg.TilectlBin == "" || cfg.ProviderBin == "" {
		fmt.Fprintf(cfg.Log, "building tilectl and tileprovider...\n")
		tc, tp, err := testbin.Build(ctx, filepath.Join(cfg.WorkDir, "bin"))
		if err != nil {
			return nil, err
		}
		cfg.TilectlBin, cfg.ProviderBin = tc, tp
	}
	fmt.Fprintf(cfg.Log, "starting a throwaway PostgreSQL cluster...\n")
	cl, err := startCluster(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.stop() // its databases go with it
	dbs, err := createDatabases(ctx, cl.adminURL())
	if err != nil {
		return nil, err
	}
	s := &soak{cfg: cfg, dbs: dbs, rep: rep, chk: newChecker(), cluster: cl}
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	for i := 1; i <= cfg.Rounds; i++ {
		if err := s.round(ctx, i); err != nil {
			// The table then describes the rounds that finished, not
			// the ones asked for, and says where the soak stopped.
			rep.Rounds, rep.AbortedIn = i-1, i
			rep.Checked, rep.Violations = s.chk.checked, s.chk.violations
			rep.Took = time.Since(start)
			return rep, fmt.Errorf("round %d: %w", i, err)
		}
	}
	s.chk.check("db-connection-broken-at-least-once", rep.DBBreaks > 0,
		"no tilectl database backend was terminated during the soak")
	s.chk.check("db-restarted-and-provider-crashed-mid-run", rep.DBRestarts > 0 && rep.ProviderKills > 0,
		"%d database restart(s) and %d provider crash(es) landed mid-run; want at least one of each",
		rep.DBRestarts, rep.ProviderKills)
	rep.Checked, rep.Violations = s.chk.checked, s.chk.violations
	rep.Took = time.Since(start)
	return rep, nil
}
