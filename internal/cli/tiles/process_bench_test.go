package tiles

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// BenchmarkImportProcess runs the real `tilectl tiles import` binary over
// directories of 10,000 and 100,000 distinct tiles of 16 KiB (a valid PNG
// header, then noise), a new flight and an empty cache each iteration, and
// reports the process's rate (tiles/s, start to exit) and peak resident
// set (MB-peak, the kernel's Maxrss of the tilectl process, started from a
// small launcher so that the benchmark's own memory is not counted; see
// launch). Issue #11: at least 5,000 tiles/s at 10,000 tiles, and memory
// flat in the tile count. TILECTL_BENCH_IMPORT_TILES replaces 100,000.
func BenchmarkImportProcess(b *testing.B) {
	big := 100_000
	if v, err := strconv.Atoi(os.Getenv("TILECTL_BENCH_IMPORT_TILES")); err == nil && v > 10_000 {
		big = v
	}
	bin := buildTilectl(b)
	src := b.TempDir()
	all := writeNoiseTiles(b, filepath.Join(src, "all"), big, 16<<10)
	// The 10,000-tile directory is the first 10,000 of the same files.
	small := filepath.Join(src, "small")
	for _, rel := range all[:10_000] {
		if err := os.MkdirAll(filepath.Join(small, filepath.Dir(rel)), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Link(filepath.Join(src, "all", rel), filepath.Join(small, rel)); err != nil {
			b.Fatal(err)
		}
	}
	dbURL := pgtest.NewURL(b)
	for _, c := range []struct {
		name string
		dir  string
		n    int
	}{{"10k", small, 10_000}, {fmt.Sprintf("%dk", big/1000), filepath.Join(src, "all"), big}} {
		b.Run(c.name, func(b *testing.B) {
			var peakKB, floorKB int64
			var elapsed float64
			i := 0
			for b.Loop() {
				i++
				b.StopTimer()
				cache := filepath.Join(b.TempDir(), "cache")
				b.StartTimer()
				r := launchImport(b, bin, dbURL, cache, fmt.Sprintf("bench-%s-%d", c.name, i), c.dir)
				peakKB, floorKB = max(peakKB, r.maxKB), max(floorKB, r.launcherKB)
				elapsed += r.seconds
				b.StopTimer()
				if err := os.RemoveAll(cache); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(c.n*b.N)/elapsed, "tiles/s")
			b.ReportMetric(float64(peakKB)/1024, "MB-peak")
			b.ReportMetric(float64(floorKB)/1024, "MB-launcher")
		})
	}
}

type launched struct {
	maxKB, launcherKB int64
	seconds           float64
}

// launchImport runs `tilectl tiles import --flight flight dir` through the
// launcher and returns what it measured; a failed import fails b.
func launchImport(b *testing.B, bin, dbURL, cache, flight, dir string) launched {
	b.Helper()
	argv, _ := json.Marshal([]string{bin, "tiles", "import", "--flight", flight, dir})
	cmd := exec.Command(os.Args[0])
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TILECTL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "TILECTL_TILES_LAUNCH="+string(argv),
		"TILECTL_DATABASE_URL="+dbURL, "TILECTL_CACHE_DIR="+cache)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("tilectl tiles import: %v\n%s", err, stderr.String())
	}
	var r launched
	var ns int64
	for _, line := range strings.Split(stderr.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "launch: "); ok {
			if _, err := fmt.Sscanf(rest, "maxrss_kb=%d launcher_hwm_kb=%d elapsed_ns=%d", &r.maxKB, &r.launcherKB, &ns); err != nil {
				b.Fatalf("launcher line %q: %v", line, err)
			}
		}
	}
	if ns == 0 {
		b.Fatalf("the launcher reported nothing:\n%s", stderr.String())
	}
	r.seconds = float64(ns) / 1e9
	return r
}

// buildTilectl builds cmd/tilectl into a temporary directory.
func buildTilectl(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "tilectl")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tilectl")
	cmd.Dir = "../../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/tilectl: %v\n%s", err, out)
	}
	return bin
}

// writeNoiseTiles writes n distinct tiles of size bytes after a valid PNG
// header under dir (z=17, about sqrt(n) tiles per x directory) and returns
// their paths relative to dir, in the order written.
func writeNoiseTiles(b *testing.B, dir string, n, size int) []string {
	b.Helper()
	var head bytes.Buffer
	if err := png.Encode(&head, image.NewNRGBA(image.Rect(0, 0, 1, 1))); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, uint64(n)))
	side := 1
	for side*side < n {
		side++
	}
	data := make([]byte, head.Len()+size)
	copy(data, head.Bytes())
	rels := make([]string, 0, n)
	for x := 0; len(rels) < n; x++ {
		if err := os.MkdirAll(filepath.Join(dir, "17", strconv.Itoa(x)), 0o755); err != nil {
			b.Fatal(err)
		}
		for y := 0; y < side && len(rels) < n; y++ {
			for i := head.Len(); i+8 <= len(data); i += 8 {
				binary.LittleEndian.PutUint64(data[i:], rng.Uint64())
			}
			rel := filepath.Join("17", strconv.Itoa(x), strconv.Itoa(y)+".png")
			if err := os.WriteFile(filepath.Join(dir, rel), data, 0o644); err != nil {
				b.Fatal(err)
			}
			rels = append(rels, rel)
		}
	}
	return rels
}
