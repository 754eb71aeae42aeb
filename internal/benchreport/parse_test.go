package benchreport

import (
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/tilectl/tilectl/fdr
BenchmarkAppend-2        	  500000	      2100 ns/op	  476190 records/s	     120 B/op	       2 allocs/op
BenchmarkEndToEnd/tilectl-2  1  2000000000 ns/op  40.0 MB/s
BenchmarkEndToEnd/baseline-2 1  1600000000 ns/op  50.0 MB/s
BenchmarkVs/small-2 1 9000000000 ns/op  4000 baseline-tiles/s  3000 tilectl-tiles/s  100 tilectl-us/tile
BenchmarkVs/large-2 1 9000000000 ns/op  4000 baseline-tiles/s  3000 tilectl-tiles/s  120 tilectl-us/tile
PASS
`

func TestParseReadsNamesPackagesAndEveryMetric(t *testing.T) {
	rs, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 5 {
		t.Fatalf("got %d results, want 5", len(rs))
	}
	if rs[0].Name != "BenchmarkAppend" || rs[0].Pkg != "github.com/tilectl/tilectl/fdr" || rs[0].N != 500000 {
		t.Errorf("first result = %+v", rs[0])
	}
	if got := rs[0].Metrics["records/s"]; got != 476190 {
		t.Errorf("records/s = %v", got)
	}
	if got := rs[0].Metrics["allocs/op"]; got != 2 {
		t.Errorf("allocs/op = %v", got)
	}
}

func TestEvaluateChecksLimitsAndBaselineRatios(t *testing.T) {
	rs, _ := Parse(strings.NewReader(sample))
	rows := Evaluate([]Target{
		{What: "append", Bench: "BenchmarkAppend", Metric: "records/s", Unit: "rec/s", AtLeast: 200000},
		{What: "append slow", Bench: "BenchmarkAppend", Metric: "ns/op", Unit: "ns", AtMost: 1000},
		{What: "e2e", Bench: "BenchmarkEndToEnd/tilectl", Metric: "MB/s", Unit: "MB/s", AtLeast: 0.8, Baseline: "BenchmarkEndToEnd/baseline"},
		{What: "absent", Bench: "BenchmarkNope", Metric: "ns/op"},
	}, rs)
	want := []string{"ok", "MISSED", "ok", "not measured"}
	for i, w := range want {
		if rows[i].Verdict != w {
			t.Errorf("row %d (%s) verdict = %q, want %q", i, rows[i].What, rows[i].Verdict, w)
		}
	}
	if r := rows[2].Ratio; r < 0.79 || r > 0.81 {
		t.Errorf("ratio = %v, want 0.8", r)
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| e2e | 40.0 MB/s | ratio >= 0.8 | 0.80x of 50.0 MB/s | ok |") {
		t.Errorf("markdown:\n%s", b.String())
	}
}

func TestEvaluateComparesTwoMetricsOfOneRunAndOneMetricOfTwoRuns(t *testing.T) {
	rs, _ := Parse(strings.NewReader(sample))
	rows := Evaluate([]Target{
		{What: "vs baseline", Bench: "BenchmarkVs/small", Metric: "tilectl-tiles/s", BaselineMetric: "baseline-tiles/s", Unit: "tiles/s", AtLeast: 0.7},
		{What: "scaling", Bench: "BenchmarkVs/large", Metric: "tilectl-us/tile", Baseline: "BenchmarkVs/small", Unit: "us/tile", AtMost: 1.1},
		{What: "strict", Bench: "BenchmarkVs/small", Metric: "tilectl-tiles/s", BaselineMetric: "baseline-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	}, rs)
	if rows[0].Verdict != "ok" || rows[0].Ratio != 0.75 || rows[0].Base != 4000 {
		t.Errorf("vs baseline: %+v, want ok at 0.75 of 4000", rows[0])
	}
	if rows[1].Verdict != "MISSED" || rows[1].Ratio < 1.19 || rows[1].Ratio > 1.21 {
		t.Errorf("scaling: %+v, want MISSED at 1.2", rows[1])
	}
	if rows[2].Verdict != "MISSED" {
		t.Errorf("strict: %+v, want MISSED", rows[2])
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| vs baseline | 3000 tiles/s | ratio >= 0.7 | 0.75x of 4000 tiles/s | ok |") {
		t.Errorf("markdown:\n%s", b.String())
	}
}
