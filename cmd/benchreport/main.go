// Command benchreport reads `go test -bench` output on stdin and prints the
// table of tilectl's performance targets, writing the same rows as JSON to
// -json (for comparing commits). It exits 1 when a measured target is missed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/tilectl/tilectl/internal/benchreport"
)

func main() {
	jsonPath := flag.String("json", "", "also write the rows as JSON to this file")
	flag.Parse()
	results, err := benchreport.Parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport: read benchmark output:", err)
		os.Exit(2)
	}
	rows := benchreport.Evaluate(benchreport.Targets, results)
	if err := benchreport.WriteMarkdown(os.Stdout, rows); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(2)
	}
	if *jsonPath != "" {
		b, _ := json.MarshalIndent(struct {
			Rows    []benchreport.Row    `json:"rows"`
			Results []benchreport.Result `json:"results"`
		}{rows, results}, "", "  ")
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport: write json:", err)
			os.Exit(2)
		}
	}
	for _, r := range rows {
		if r.Found && !r.Pass {
			os.Exit(1)
		}
	}
}
