package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the report as the table docs/chaos.md shows.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("seed", r.Seed)
	if r.AbortedIn > 0 {
		row("rounds", fmt.Sprintf("%d finished (stopped by an error in round %d)", r.Rounds, r.AbortedIn))
	} else {
		row("rounds", r.Rounds)
	}
	row("tiles per round", r.Tiles)
	row("rounds with a client ID (strict sequencing)", r.SequencedRounds)
	row("upload-pending runs", r.Runs)
	row("SIGKILLs", r.Kills)
	row("DB connection breaks", r.DBBreaks)
	row("DB restarts (-m immediate), mid-batch", fmt.Sprintf("%d, %d", r.DBRestarts, r.DBRestartsMidBatch))
	row("provider SIGKILLs + restarts, mid-batch", fmt.Sprintf("%d, %d", r.ProviderKills, r.ProviderKillsMidBatch))
	row("rounds with a DB restart / provider crash mid-run", fmt.Sprintf("%d / %d of %d", r.RoundsWithDBRestart, r.RoundsWithProviderCrash, r.Rounds))
	row("exit codes (unkilled runs)", joinCounts(intKeys(r.ExitCodes)))
	row("tiles uploaded / given up", fmt.Sprintf("%d / %d", r.Uploaded, r.GivenUp))
	total := 0
	for _, v := range r.Faults {
		total += v
	}
	row("provider faults", total)
	for _, k := range sortedKeys(r.Faults) {
		row("  "+k, r.Faults[k])
	}
	checks := 0
	for _, v := range r.Checked {
		checks += v
	}
	row("answers replayed by the provider", r.Replays)
	row("invariants checked", fmt.Sprintf("%d kinds, %d evaluations", len(r.Checked), checks))
	for _, k := range sortedKeys(r.Checked) {
		row("  "+k, r.Checked[k])
	}
	row("violations", len(r.Violations))
	row("took", r.Took.Round(1e7))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range r.Violations {
		if _, err := fmt.Fprintf(w, "VIOLATION %s\n", v); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func intKeys(m map[int]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[fmt.Sprint(k)] = v
	}
	return out
}

func joinCounts(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
