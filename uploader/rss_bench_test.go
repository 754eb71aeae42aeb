package uploader_test

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// BenchmarkPeakRSS100k runs the uploader in a child process (the test
// binary's child mode) over a flight of TILECTL_BENCH_RSS_TILES tiles
// (default 100,000) of about 1 KiB, and reports the child's peak resident
// set (VmHWM, read by the child itself): memory must stay flat whatever
// the flight size.
func BenchmarkPeakRSS100k(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_RSS_TILES")); err == nil && v > 0 {
		n = v
	}
	p := providertest.Start(b, func(c *provider.Config) { c.SkipFsync = true })
	c := providertest.NewClient(b, benchFlight)
	c.AddTiles(b, benchFlight, n, 1024, 5)
	var peakKB int64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		benchReset(b, c, p)
		b.StartTimer()
		for run := 0; ; run++ {
			if run > 5 {
				b.Fatal("child never finished the flight")
			}
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "TILECTL_UPLOADER_CHILD=1", "CHILD_DB_URL="+c.URL, "CHILD_BLOB_ROOT="+c.Blobs.Root(),
				"CHILD_PROVIDER_URL="+p.URL, "CHILD_TOKEN="+providertest.Token, "CHILD_FLIGHT="+benchFlight,
				"CHILD_BATCH_SIZE=256", "CHILD_CONCURRENCY=4", "CHILD_REPORT_HWM=1")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			err := cmd.Run()
			for _, line := range strings.Split(errb.String(), "\n") {
				if v, ok := strings.CutPrefix(line, "vmhwm_kb="); ok {
					kb, _ := strconv.ParseInt(v, 10, 64)
					peakKB = max(peakKB, kb)
				}
			}
			if f := os.Getenv("TILECTL_BENCH_RSS_STDERR"); f != "" {
				_ = os.WriteFile(f, errb.Bytes(), 0o600) // e.g. with GODEBUG=gctrace=1
			}
			if err == nil {
				break
			}
			b.Logf("child run %d: %v: %s", run, err, errb.String())
		}
	}
	b.ReportMetric(float64(peakKB)/1024, "MB-peak")
	b.ReportMetric(float64(n), "tiles")
}
