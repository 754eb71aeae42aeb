package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/provider"
)

// A run killed with SIGKILL cannot write its end: the history keeps it
// visibly unfinished, and the next run records its own row beside it.
// status shows both, as text with --flight and in -o json.
func TestRunHistoryKeepsASIGKILLedRunUnfinishedAndRecordsTheNextRun(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	var once sync.Once
	prov := refProvider(t, provider.FaultConfig{Latency: 200 * time.Millisecond},
		func(string) { once.Do(func() { close(started) }) })
	s := newSite(t, prov.URL)
	s.flight("hist1", 8)

	killed := s.command("upload-pending", "--flight", "hist1", "--batch-size", "2", "--concurrency", "1")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		_ = killed.Process.Kill()
		t.Fatal("no batch reached the provider")
	}
	if err := killed.Process.Kill(); err != nil { // SIGKILL mid-upload
		t.Fatal(err)
	}
	_ = killed.Wait()
	killedPID := killed.Process.Pid

	var rows int
	var unfinished bool
	s.query(func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(),
			`SELECT count(*), bool_and(finished_at IS NULL AND exit_code IS NULL AND accepted IS NULL) FROM upload_runs WHERE flight_id = 'hist1'`).
			Scan(&rows, &unfinished)
	})
	if rows != 1 || !unfinished {
		t.Fatalf("after SIGKILL: %d history rows, unfinished=%v; want 1 row with no end", rows, unfinished)
	}

	if r := s.run(time.Minute, "upload-pending", "--flight", "hist1", "--batch-size", "2"); r.exit != 0 {
		t.Fatalf("second run: exit %d\nstderr: %s", r.exit, r.stderr)
	}

	text := s.mustRun("status", "--flight", "hist1").stdout
	for _, want := range []string{"Upload runs (showing 2 of 2, newest first", "unfinished (still running, or process gone?)", "success"} {
		if !strings.Contains(text, want) {
			t.Fatalf("status text lacks %q:\n%s", want, text)
		}
	}

	var rep struct {
		Flights []struct {
			FlightID  string `json:"flight_id"`
			RunsTotal int64  `json:"runs_total"`
			Runs      []struct {
				RunID      string     `json:"run_id"`
				PID        int        `json:"pid"`
				Host       string     `json:"host"`
				Finished   bool       `json:"finished"`
				FinishedAt *time.Time `json:"finished_at"`
				Outcome    *string    `json:"outcome"`
				ExitCode   *int       `json:"exit_code"`
				Accepted   *int       `json:"accepted"`
				Duplicate  *int       `json:"duplicate"`
				Pending    *int       `json:"pending"`
			} `json:"runs"`
		} `json:"flights"`
	}
	out := s.mustRun("status", "-o", "json").stdout
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if len(rep.Flights) != 1 || len(rep.Flights[0].Runs) != 2 || rep.Flights[0].RunsTotal != 2 {
		t.Fatalf("want flight hist1 with 2 runs:\n%s", out)
	}
	last, first := rep.Flights[0].Runs[0], rep.Flights[0].Runs[1] // newest first
	if !last.Finished || last.FinishedAt == nil || last.Outcome == nil || *last.Outcome != "success" ||
		last.ExitCode == nil || *last.ExitCode != 0 || last.Pending == nil || *last.Pending != 0 ||
		last.Accepted == nil || last.Duplicate == nil || *last.Accepted+*last.Duplicate == 0 {
		t.Fatalf("the second run's row is not a finished success:\n%s", out)
	}
	if first.Finished || first.FinishedAt != nil || first.Outcome != nil || first.ExitCode != nil || first.Accepted != nil {
		t.Fatalf("the killed run's row is not unfinished (null end, null counts):\n%s", out)
	}
	if first.PID != killedPID || first.Host == "" || first.RunID == "" || first.RunID == last.RunID {
		t.Fatalf("killed run: pid %d (want %d), host %q, run IDs %q / %q", first.PID, killedPID, first.Host, first.RunID, last.RunID)
	}
}
