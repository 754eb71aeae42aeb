// Command tilechaos soaks tilectl against the reference provider with
// faults, SIGKILLs, broken database connections, database restarts and
// provider crashes, and checks that no tile was stored twice, lost or
// miscounted. See docs/chaos.md.
//
// Every flag may also come from the environment: SEED, ROUNDS, TILES,
// FAULT_RATE, MAX_RUNS. A run is repeated with the seed it prints. With
// -doc FILE (make chaos DOC=docs/chaos.md) the run's record replaces the
// last long run's in that page.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/tilectl/tilectl/internal/benchreport"
	"github.com/tilectl/tilectl/internal/chaos"
)

// writeDoc replaces the last long run's record in the page at path with
// rep's, naming the command that repeats the run and the machine.
func writeDoc(path string, rep *chaos.Report, cfg chaos.Config) error {
	page, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s for -doc: %w", path, err)
	}
	run := chaos.DocRun{
		Command: fmt.Sprintf("make chaos SEED=%d ROUNDS=%d TILES=%d FAULT_RATE=%g", cfg.Seed, cfg.Rounds, cfg.Tiles, max(cfg.FaultRate, 0)),
		Machine: machine(),
	}
	var section bytes.Buffer
	if err := rep.WriteDoc(&section, run); err != nil {
		return err
	}
	out, err := chaos.ReplaceDoc(page, section.Bytes())
	if err != nil {
		return fmt.Errorf("-doc %s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// machine names this machine as docs/performance.md does: processors, CPU
// model and memory, "unknown" for what cannot be read.
func machine() string {
	model, cores := "unknown CPU", 0
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		if m, n, err := benchreport.ReadCPUInfo(f); err == nil && m != "" {
			model, cores = m, n
		}
		f.Close()
	}
	mem := "unknown memory"
	if f, err := os.Open("/proc/meminfo"); err == nil {
		if b, err := benchreport.ReadMemTotal(f); err == nil && b > 0 {
			mem = fmt.Sprintf("%d GiB", (b+1<<29)>>30)
		}
		f.Close()
	}
	if cores == 0 {
		return model + ", " + mem
	}
	return fmt.Sprintf("%d x %s, %s", cores, model, mem)
}

func main() {
	os.Exit(run())
}

func run() int {
	var cfg chaos.Config
	seed := flag.Uint64("seed", envUint("SEED", 0), "random seed (0: pick one and print it); env SEED")
	flag.IntVar(&cfg.Rounds, "rounds", int(envUint("ROUNDS", 3)), "flights to soak; env ROUNDS")
	flag.IntVar(&cfg.Tiles, "tiles", int(envUint("TILES", 60)), "tiles per flight; env TILES")
	flag.Float64Var(&cfg.FaultRate, "fault-rate", envFloat("FAULT_RATE", 0.3), "provider fault rate; env FAULT_RATE")
	flag.IntVar(&cfg.MaxRunsPerRound, "max-runs", int(envUint("MAX_RUNS", 40)), "upload-pending runs a round may need; env MAX_RUNS")
	flag.StringVar(&cfg.TilectlBin, "tilectl", os.Getenv("TILECTL_BIN"), "tilectl binary (empty: go build it); env TILECTL_BIN")
	flag.StringVar(&cfg.ProviderBin, "tileprovider", os.Getenv("TILEPROVIDER_BIN"), "tileprovider binary (empty: go build it); env TILEPROVIDER_BIN")
	quiet := flag.Bool("q", false, "print only the final table")
	doc := flag.String("doc", os.Getenv("DOC"), "write the run's record into this page between its last-run markers (docs/chaos.md); env DOC")
	flag.Parse()
	if cfg.FaultRate == 0 {
		cfg.FaultRate = -1 // chaos.Config: negative means no faults
	}
	cfg.Seed = *seed
	if cfg.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Seed = binary.LittleEndian.Uint64(b[:]) >> 1
	}
	if !*quiet {
		cfg.Log = os.Stderr
	}
	fmt.Printf("tilechaos: SEED=%d ROUNDS=%d TILES=%d FAULT_RATE=%g (repeat with SEED=%d)\n",
		cfg.Seed, cfg.Rounds, cfg.Tiles, max(cfg.FaultRate, 0), cfg.Seed)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil {
		_ = rep.WriteTable(os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tilechaos: %v (SEED=%d)\n", err, cfg.Seed)
		return 2
	}
	if *doc != "" {
		if err := writeDoc(*doc, rep, cfg); err != nil {
			fmt.Fprintf(os.Stderr, "tilechaos: %v\n", err)
			return 2
		}
	}
	if len(rep.Violations) > 0 {
		fmt.Fprintf(os.Stderr, "tilechaos: %d violation(s); repeat with SEED=%d\n", len(rep.Violations), cfg.Seed)
		return 1
	}
	return 0
}

func envUint(name string, def uint64) uint64 {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			return n
		}
		fmt.Fprintf(os.Stderr, "tilechaos: ignoring %s=%q: not a non-negative integer\n", name, v)
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if v := os.Getenv(name); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
		fmt.Fprintf(os.Stderr, "tilechaos: ignoring %s=%q: not a number\n", name, v)
	}
	return def
}
