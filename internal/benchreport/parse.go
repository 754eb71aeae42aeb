// Package benchreport turns `go test -bench` output into the table of
// performance targets that `make bench` prints, and into JSON that can be
// compared across commits.
package benchreport

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// Result is one benchmark line: its name (without the -N GOMAXPROCS suffix),
// iterations and every metric it reported, keyed by unit ("ns/op",
// "B/op", "ops/s", "p99-ms", ...).
type Result struct {
	Pkg     string             `json:"pkg"`
	Name    string             `json:"name"`
	N       int64              `json:"n"`
	Metrics map[string]float64 `json:"metrics"`
}

// Parse reads benchmark output. Lines that are not results are ignored; a
// "pkg:" line sets the package of the results after it.
func Parse(r io.Reader) ([]Result, error) {
	var out []Result
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		res := Result{Pkg: pkg, Name: trimProcs(f[0]), N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res.Metrics[f[i+1]] = v
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// trimProcs drops the "-8" GOMAXPROCS suffix go test appends to names.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}
