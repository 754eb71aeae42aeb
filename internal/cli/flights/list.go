package flights

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
)

// ListStore is what `flights list` reads.
type ListStore interface {
	FlightOverviews(ctx context.Context) ([]tilestore.FlightOverview, error)
}

var _ ListStore = (*tilestore.Store)(nil)

// ListOptions are `flights list`'s inputs.
type ListOptions struct {
	IO    *iostreams.IOStreams
	Store func(ctx context.Context) (ListStore, error)
	Now   func() time.Time

	Output string // text or json
}

// ListReport is `flights list -o json`'s output (see the package doc).
type ListReport struct {
	Flights []Flight `json:"flights"`
}

// Flight is one flight of ListReport.
type Flight struct {
	FlightID   string           `json:"flight_id"`
	State      string           `json:"state"`
	RecordedAt time.Time        `json:"recorded_at"`
	AgeSeconds int64            `json:"age_seconds"`
	Counts     map[string]int64 `json:"counts"`
	Total      int64            `json:"total"`
	CacheBytes int64            `json:"cache_bytes"`
	LastRun    *LastRun         `json:"last_run"`
}

// LastRun is a flight's newest upload-pending run.
type LastRun struct {
	RunID      string     `json:"run_id"`
	Host       string     `json:"host"`
	PID        int        `json:"pid"`
	StartedAt  time.Time  `json:"started_at"`
	Finished   bool       `json:"finished"`
	FinishedAt *time.Time `json:"finished_at"`
	Outcome    *string    `json:"outcome"`
	ExitCode   *int       `json:"exit_code"`
}

// NewCmdList is `flights list [-o text|json]`.
func NewCmdList(f *factory.Factory, runF func(context.Context, *ListOptions) error) *cobra.Command {
	opts := &ListOptions{IO: f.IOStreams, Now: f.Now,
		Store: func(ctx context.Context) (ListStore, error) { return f.Store(ctx) }}
	cmd := &cobra.Command{
		Use:   "list [-o text|json]",
		Short: "One line per flight: state, tiles by status, cache bytes, last run, age",
		Long: "List every recorded flight: its state, its tiles by status, the bytes its tiles\n" +
			"take in the cache (CACHE: the sum of the recorded sizes of the flight's tiles whose\n" +
			"blob is kept in the cache, which is every tile 'tiles import' recorded; not the\n" +
			"space the filesystem allocates for them), its last upload-pending run (when it\n" +
			"started and its outcome, or 'never'), and its age (since the flight was first\n" +
			"recorded). The same table is printed on a terminal and off it; -o json prints\n" +
			"one object with stable field names ({\"flights\": [...]}).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := iostreams.CheckOutput(opts.Output); err != nil {
				return exitcode.UsageError(err)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return ListRun(cmd.Context(), opts)
		},
	}
	iostreams.AddOutputFlag(cmd, &opts.Output)
	return cmd
}

// ListRun prints the flights.
func ListRun(ctx context.Context, opts *ListOptions) error {
	store, err := opts.Store(ctx)
	if err != nil {
		return err
	}
	fos, err := store.FlightOverviews(ctx)
	if err != nil {
		return err
	}
	r := buildList(fos, opts.Now())
	if iostreams.IsJSON(opts.Output) {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return printList(opts.IO, r)
}

func buildList(fos []tilestore.FlightOverview, now time.Time) ListReport {
	r := ListReport{Flights: []Flight{}}
	for _, fo := range fos {
		fl := Flight{FlightID: fo.FlightID, State: string(fo.State), RecordedAt: fo.RecordedAt.UTC(),
			AgeSeconds: max(0, int64(now.Sub(fo.RecordedAt)/time.Second)), Counts: map[string]int64{},
			CacheBytes: fo.CacheBytes}
		for _, s := range tilestore.VotingStatuses {
			fl.Counts[string(s)] = fo.ByStatus[s]
			fl.Total += fo.ByStatus[s]
		}
		if u := fo.LastRun; u != nil {
			lr := &LastRun{RunID: u.RunID, Host: u.Host, PID: u.PID, StartedAt: u.StartedAt.UTC(),
				Finished: u.FinishedAt != nil, Outcome: u.Outcome, ExitCode: u.ExitCode}
			if u.FinishedAt != nil {
				t := u.FinishedAt.UTC()
				lr.FinishedAt = &t
			}
			fl.LastRun = lr
		}
		r.Flights = append(r.Flights, fl)
	}
	return r
}

func printList(io *iostreams.IOStreams, r ListReport) error {
	if len(r.Flights) == 0 {
		fmt.Fprintln(io.Out, "no flights (import one with 'tilectl tiles import --flight F DIR')")
		return nil
	}
	tw := tabwriter.NewWriter(io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLIGHT\tSTATE\tPENDING\tTRUSTED\tREJECTED\tUPLOADED\tGIVEN UP\tCACHE\tLAST RUN\tAGE")
	for _, f := range r.Flights {
		fmt.Fprintf(tw, "%s\t%s", f.FlightID, f.State)
		for _, s := range tilestore.VotingStatuses {
			fmt.Fprintf(tw, "\t%d", f.Counts[string(s)])
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s\n", iostreams.HumanBytes(f.CacheBytes), lastRun(f.LastRun),
			age(time.Duration(f.AgeSeconds)*time.Second))
	}
	return tw.Flush()
}

// lastRun is the LAST RUN cell: when the run started and how it ended.
func lastRun(u *LastRun) string {
	if u == nil {
		return "never"
	}
	outcome := "unfinished"
	if u.Outcome != nil {
		outcome = *u.Outcome
	} else if u.Finished {
		outcome = "finished"
	}
	return u.StartedAt.Format(time.RFC3339) + " " + outcome
}

// age is a flight's age for people: minutes under an hour, hours under two
// days, days after.
func age(d time.Duration) string {
	switch {
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}
