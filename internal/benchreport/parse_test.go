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
PASS
`

func TestParseReadsNamesPackagesAndEveryMetric(t *testing.T) {
	rs, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("got %d results, want 3", len(rs))
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
