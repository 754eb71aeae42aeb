// Command benchreport reads `go test -bench` output on stdin and prints the
// table of tilectl's performance targets. With -page it writes the
// measurements page (docs/performance.md: the command, the machine, the
// date and the table); with -json it writes the rows as JSON (for
// comparing commits). It exits 1 when a measured target is missed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/benchreport"
)

func main() {
	jsonPath := flag.String("json", "", "also write the rows as JSON to this file")
	pagePath := flag.String("page", "", "also write the measurements page (Markdown) to this file")
	command := flag.String("command", "", "the command that produced the benchmark output, shown on the page")
	dbURL := flag.String("database-url", os.Getenv("TILECTL_TEST_DATABASE_URL"), "the database the benchmarks used, asked for its version for the page")
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
	if *pagePath != "" {
		page := benchreport.Page{Command: *command, Date: time.Now(), Machine: machine(*dbURL), Rows: rows}
		if err := writePage(*pagePath, page); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(2)
		}
	}
	for _, r := range rows {
		if r.Found && !r.Pass {
			os.Exit(1)
		}
	}
}

// machine describes this machine; what it cannot learn stays empty (the
// page says "unknown") and is reported on stderr.
func machine(dbURL string) benchreport.Machine {
	m := benchreport.Machine{GoVersion: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport: cpu:", err)
	} else {
		m.CPU, m.Cores, err = benchreport.ReadCPUInfo(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchreport: cpu:", err)
		}
	}
	if f, err := os.Open("/proc/meminfo"); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport: memory:", err)
	} else {
		m.MemoryBytes, err = benchreport.ReadMemTotal(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchreport: memory:", err)
		}
	}
	if m.Cores == 0 {
		m.Cores = runtime.NumCPU()
	}
	if dbURL != "" {
		v, err := postgresVersion(dbURL)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchreport: postgres version:", err)
		}
		m.Postgres = v
	}
	return m
}

func postgresVersion(dbURL string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "", fmt.Errorf("show server_version: %w", err)
	}
	return v, nil
}

// writePage writes the page beside its destination and renames it over,
// so an interrupted run leaves the previous page whole.
func writePage(path string, p benchreport.Page) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write page %s: %w", path, err)
	}
	if err := benchreport.WritePage(f, p); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write page %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write page %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write page %s: %w", path, err)
	}
	return nil
}
