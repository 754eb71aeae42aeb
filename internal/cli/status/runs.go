package status

import (
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
)

// unfinished is what the text shows for a run without a recorded end: it
// may still be running, or its process was killed before writing its end.
const unfinished = "unfinished (still running, or process gone?)"

// addRuns puts each run under its flight.
func addRuns(r *Report, runs []tilestore.UploadRun, totals map[string]int64) {
	idx := map[string]int{}
	for i, f := range r.Flights {
		idx[f.FlightID] = i
		r.Flights[i].RunsTotal = totals[f.FlightID]
	}
	for _, u := range runs {
		i, ok := idx[u.FlightID]
		if !ok {
			continue // a run of a flight that was not imported (or was removed)
		}
		var at *time.Time
		if u.FinishedAt != nil {
			t := u.FinishedAt.UTC()
			at = &t
		}
		r.Flights[i].Runs = append(r.Flights[i].Runs, UploadRun{RunID: u.RunID, Host: u.Host, PID: u.PID, Version: u.Version,
			StartedAt: u.StartedAt.UTC(), Finished: u.FinishedAt != nil, FinishedAt: at, Outcome: u.Outcome,
			ExitCode: u.ExitCode, Accepted: u.Accepted, Duplicate: u.Duplicate, Rejected: u.Rejected,
			GivenUp: u.GivenUp, Pending: u.Pending, Bytes: u.Bytes, Error: u.Error})
	}
}

// printRuns is the text list of one flight's last runs.
func printRuns(io *iostreams.IOStreams, f Flight) error {
	if len(f.Runs) == 0 {
		fmt.Fprintf(io.Out, "\nNo upload runs recorded for %s.\n", f.FlightID)
		return nil
	}
	fmt.Fprintf(io.Out, "\nUpload runs (showing %s of %s, newest first; --runs shows more):\n",
		thousands(int64(len(f.Runs))), thousands(f.RunsTotal))
	tw := tabwriter.NewWriter(io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STARTED\tELAPSED\tHOST\tPID\tRUN ID\tOUTCOME\tEXIT\tACCEPTED\tDUPLICATE\tREJECTED\tGIVEN UP\tPENDING\tBYTES")
	for _, u := range f.Runs {
		id := u.RunID
		if len(id) > 12 {
			id = id[:12]
		}
		fmt.Fprintf(tw, "%s\t", u.StartedAt.Format(time.RFC3339))
		if !u.Finished {
			fmt.Fprintf(tw, "-\t%s\t%d\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", u.Host, u.PID, id, unfinished)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			u.FinishedAt.Sub(u.StartedAt).Round(time.Millisecond), u.Host, u.PID, id, str(u.Outcome), num(u.ExitCode),
			num(u.Accepted), num(u.Duplicate), num(u.Rejected), num(u.GivenUp), num(u.Pending), num64(u.Bytes))
	}
	return tw.Flush()
}

func str(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

func num(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

func num64(n *int64) string {
	if n == nil {
		return "-"
	}
	return thousands(*n)
}
