package benchreport

import (
	"fmt"
	"io"
	"strings"
)

// Target is one performance promise from the issues, checked against one
// metric of one benchmark.
type Target struct {
	Issue  string  `json:"issue"`
	What   string  `json:"what"`
	Bench  string  `json:"bench"`  // benchmark name, as printed without -N
	Metric string  `json:"metric"` // unit reported by the benchmark
	Scale  float64 `json:"-"`      // multiply the metric by this to show it in Unit
	Unit   string  `json:"unit"`
	// AtMost or AtLeast is the limit, in Unit (one of them is set).
	AtMost  float64 `json:"at_most,omitempty"`
	AtLeast float64 `json:"at_least,omitempty"`
	// Baseline names another benchmark whose same metric this one is
	// compared with; the limit then applies to the ratio.
	Baseline string `json:"baseline,omitempty"`
	// BaselineMetric, when set, is the metric compared with: of the
	// Baseline benchmark, or of Bench itself when Baseline is empty (a
	// benchmark that measured tilectl and its baseline alternately in one
	// run reports both).
	BaselineMetric string `json:"baseline_metric,omitempty"`
}

// Row is a target with what was measured.
type Row struct {
	Target
	Found   bool    `json:"found"`
	Value   float64 `json:"value"`           // in Unit
	Base    float64 `json:"baseline_value"`  // in Unit, when Baseline is set
	Ratio   float64 `json:"ratio,omitempty"` // Value / Base
	Pass    bool    `json:"pass"`
	Verdict string  `json:"verdict"`
}

// Evaluate checks every target against the results.
func Evaluate(targets []Target, results []Result) []Row {
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Name] = r // the last run of a name wins
	}
	rows := make([]Row, 0, len(targets))
	for _, t := range targets {
		row := Row{Target: t}
		scale := t.Scale
		if scale == 0 {
			scale = 1
		}
		r, ok := byName[t.Bench]
		v, okm := r.Metrics[t.Metric]
		if !ok || !okm {
			row.Verdict = "not measured"
			rows = append(rows, row)
			continue
		}
		row.Found, row.Value = true, v*scale
		cmp := row.Value
		if t.Baseline != "" || t.BaselineMetric != "" {
			base, metric := t.Baseline, t.BaselineMetric
			if base == "" {
				base = t.Bench
			}
			if metric == "" {
				metric = t.Metric
			}
			b, okb := byName[base]
			bv, okbm := b.Metrics[metric]
			if !okb || !okbm || bv == 0 {
				row.Verdict = "baseline not measured"
				rows = append(rows, row)
				continue
			}
			row.Base = bv * scale
			row.Ratio = row.Value / row.Base
			cmp = row.Ratio
		}
		switch {
		case t.AtMost != 0:
			row.Pass = cmp <= t.AtMost
		case t.AtLeast != 0:
			row.Pass = cmp >= t.AtLeast
		default:
			row.Pass = true // a number to state, with no limit
		}
		row.Verdict = map[bool]string{true: "ok", false: "MISSED"}[row.Pass]
		rows = append(rows, row)
	}
	return rows
}

// WriteMarkdown prints the rows as a Markdown table.
func WriteMarkdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| issue | target | measured | limit | vs baseline | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rows {
		measured := "-"
		if r.Found {
			measured = fmt.Sprintf("%s %s", num(r.Value), r.Unit)
		}
		limit := "(stated)"
		switch {
		case r.AtMost != 0 && (r.Baseline != "" || r.BaselineMetric != ""):
			limit = fmt.Sprintf("ratio <= %s", num(r.AtMost))
		case r.AtLeast != 0 && (r.Baseline != "" || r.BaselineMetric != ""):
			limit = fmt.Sprintf("ratio >= %s", num(r.AtLeast))
		case r.AtMost != 0:
			limit = fmt.Sprintf("<= %s %s", num(r.AtMost), r.Unit)
		case r.AtLeast != 0:
			limit = fmt.Sprintf(">= %s %s", num(r.AtLeast), r.Unit)
		}
		base := "-"
		if r.Base != 0 {
			base = fmt.Sprintf("%.2fx of %s %s", r.Ratio, num(r.Base), r.Unit)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Issue, r.What, measured, limit, base, r.Verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
