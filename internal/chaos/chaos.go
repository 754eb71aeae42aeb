// Package chaos is a seeded soak of tilectl against the reference provider:
// it runs the real binaries, injects provider faults, SIGKILLs tilectl at
// random moments and breaks its database connections, then checks from
// the provider's own records, tilectl's database and its FDR file that no
// tile was stored twice, lost, or counted wrongly.
//
// It promises: the same Config.Seed replays the same flights, faults, kill
// and break schedule (timing-dependent interleavings aside); every
// violation is reported with what was seen; and the scratch databases it
// creates are dropped when it ends.
package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
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
	// AdminURL may CREATE DATABASE. Default: TILECTL_TEST_DATABASE_URL,
	// else DefaultAdminURL.
	AdminURL string
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
	if c.AdminURL == "" {
		c.AdminURL = os.Getenv("TILECTL_TEST_DATABASE_URL")
	}
	if c.AdminURL == "" {
		c.AdminURL = DefaultAdminURL
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
		tc, tp, err := BuildBinaries(ctx, filepath.Join(cfg.WorkDir, "bin"))
		if err != nil {
			return nil, err
		}
		cfg.TilectlBin, cfg.ProviderBin = tc, tp
	}
	dbs, err := createDatabases(ctx, cfg.AdminURL)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := dbs.drop(); err != nil {
			fmt.Fprintf(cfg.Log, "warning: %v\n", err)
		}
	}()
	s := &soak{cfg: cfg, dbs: dbs, rep: rep, chk: newChecker()}
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	for i := 1; i <= cfg.Rounds; i++ {
		if err := s.round(ctx, i); err != nil {
			return rep, fmt.Errorf("round %d: %w", i, err)
		}
	}
	s.chk.check("db-connection-broken-at-least-once", rep.DBBreaks > 0,
		"no tilectl database backend was terminated during the soak")
	rep.Checked, rep.Violations = s.chk.checked, s.chk.violations
	rep.Took = time.Since(start)
	return rep, nil
}
