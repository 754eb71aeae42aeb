package linkbench

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// BenchmarkUploadPendingProcess times the whole `tilectl upload-pending`
// process (start, database, capabilities, upload, settlement, summary) at
// default settings on loopback against the in-memory sink, at the sink's
// default batch limit (256 tiles) and at 64-tile batches, against the
// naive client (its capabilities request and batches of the same size)
// at concurrency 4 in the same run:
// tilectl, naive, naive, tilectl (TILECTL_BENCH_ROUNDS times, at least
// 2: runs of a second are at the mercy of whatever else the machine does),
// each side's best reported (tilectl-tiles/s, naive-tiles/s). It is the process-level companion of
// the in-process BenchmarkUploadPendingVsBaseline of internal/cli/upload:
// small batches show the per-batch costs (a durable claim and a
// settlement each) that the link profiles with small batches pay too.
// Each side's best run also reports the CPU it cost the machine, every
// process that took part counted (tilectl-cpu-us/tile: tilectl, postgres
// and the sink; naive-cpu-us/tile: the client and the sink), and
// postgres's share of tilectl's: where the cores are busy for the whole
// run, as on a small ground station, the run's time follows its CPU.
func BenchmarkUploadPendingProcess(b *testing.B) {
	for _, c := range []struct {
		name        string
		tiles, size int
	}{
		{"1KiB", 10000, 1 << 10},
		{"16KiB", 5000, 16 << 10},
		{"64KiB", 2000, 64 << 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := newRig(b, "P"+c.name, c.tiles, c.size, 0)
			for _, batch := range []int{256, 64} {
				b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchProcess(b, r, batch) })
			}
		})
	}
}

func benchProcess(b *testing.B, r *rig, batch int) {
	const conc = 4
	rounds := 2
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_ROUNDS")); err == nil && v > rounds {
		rounds = v
	}
	r.sink.SetMaxBatchTiles(batch)
	var bestT, bestN time.Duration
	var cpuT, cpuN machineCPU // of each side's best run
	tilectl := func() {
		r.reset(b)
		c0 := readMachineCPU()
		b.StartTimer()
		res := r.tilectl(b, r.sink.URL, 5*time.Minute, nil)
		b.StopTimer()
		c := readMachineCPU().since(c0)
		c.tilectl = res.cpu
		if res.exit != 0 {
			b.Fatalf("tilectl exited %d:\n%s", res.exit, tail(res.stderr))
		}
		r.checkHeld(b, "tilectl")
		if bestT == 0 || res.elapsed < bestT {
			bestT, cpuT = res.elapsed, c
		}
	}
	naive := func() {
		r.reset(b)
		c0 := readMachineCPU()
		d := r.naive(b, r.sink.URL, conc).whole
		c := readMachineCPU().since(c0)
		if bestN == 0 || d < bestN {
			bestN, cpuN = d, c
		}
	}
	b.ResetTimer()
	b.StopTimer()
	for range b.N * rounds {
		tilectl()
		naive()
		naive()
		tilectl()
	}
	n := float64(len(r.tiles))
	b.ReportMetric(n/bestT.Seconds(), "tilectl-tiles/s")
	b.ReportMetric(n/bestN.Seconds(), "naive-tiles/s")
	if cpuT.pgOK && cpuN.pgOK {
		// What each side's run cost the machine's cores, every process
		// that took part counted: on a machine whose cores are all busy
		// during a run, the run's time follows its CPU.
		b.ReportMetric(float64(cpuT.total().Microseconds())/n, "tilectl-cpu-us/tile")
		b.ReportMetric(float64(cpuN.total().Microseconds())/n, "naive-cpu-us/tile")
		b.ReportMetric(float64(cpuT.pg.Microseconds())/n, "tilectl-pg-cpu-us/tile")
		b.ReportMetric(float64(cpuT.tilectl.Microseconds())/n, "tilectl-process-cpu-us/tile")
		b.Logf("CPU of the best runs: tilectl's %v (tilectl %v, postgres %v, sink %v), naive's %v (client and sink %v, postgres %v)",
			cpuT.total().Round(time.Millisecond), cpuT.tilectl.Round(time.Millisecond), cpuT.pg.Round(time.Millisecond), cpuT.self.Round(time.Millisecond),
			cpuN.total().Round(time.Millisecond), cpuN.self.Round(time.Millisecond), cpuN.pg.Round(time.Millisecond))
	}
	b.Logf("%d tiles, %d-tile batches: tilectl process %v, naive %v (best of %d each), tilectl/naive %.2f",
		len(r.tiles), batch, bestT.Round(time.Millisecond), bestN.Round(time.Millisecond), 2*b.N*rounds, bestN.Seconds()/bestT.Seconds())
}

// machineCPU is the CPU time a run cost, by where it was spent.
type machineCPU struct {
	self    time.Duration // this process: the sink, and the naive client on its side
	pg      time.Duration // every postgres process
	pgOK    bool          // pg could be read (pgtest.ServerCPU)
	tilectl time.Duration // the tilectl process (its side only)
}

// readMachineCPU is the CPU time used so far by this process and by
// postgres.
func readMachineCPU() machineCPU {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	pg, ok := pgtest.ServerCPU()
	return machineCPU{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), pg: pg, pgOK: ok}
}

// since is the CPU time used from c0 to c.
func (c machineCPU) since(c0 machineCPU) machineCPU {
	return machineCPU{self: c.self - c0.self, pg: c.pg - c0.pg, pgOK: c.pgOK && c0.pgOK}
}

func (c machineCPU) total() time.Duration { return c.self + c.pg + c.tilectl }
