// Package status is `tilectl status`: how many tiles each flight has in
// each state, and which tiles were given up. Its JSON form is a stable,
// documented interface (README "status -o json"); the table is for people.
package status

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/tilestore"
)

// Store is what status reads.
type Store interface {
	FlightCounts(ctx context.Context, flightID string) ([]tilestore.FlightCounts, error)
	GiveUps(ctx context.Context, flightID string, limit int) ([]tilestore.GiveUp, error)
	Leases(ctx context.Context, flightID string) ([]tilestore.Lease, error)
	Runs(ctx context.Context, flightID string, limit int) ([]tilestore.UploadRun, map[string]int64, error)
	ZoomProgress(ctx context.Context, flightID string) ([]tilestore.ZoomCounts, error)
}

var _ Store = (*tilestore.Store)(nil)

// Options are `status`'s inputs.
type Options struct {
	IO    *iostreams.IOStreams
	Store func(ctx context.Context) (Store, error)

	FlightID string // "" for every flight
	Output   string // text (or its alias table) or json
	Limit    int    // give-ups listed at most
	Runs     int    // upload runs listed at most per flight
}

// Report is `status -o json`'s output.
type Report struct {
	Flights []Flight `json:"flights"`
	GiveUps []GiveUp `json:"give_ups"`
	// GiveUpsTotal is every given-up tile of the flights shown; give_ups
	// lists at most --limit of them.
	GiveUpsTotal int64 `json:"give_ups_total"`
	// OpenBatches says which upload runs hold open batches and when their
	// leases end: a live run's batches are its own; an expired lease's are
	// settled by the next run of the flight.
	OpenBatches []OpenBatches `json:"open_batches"`
}

// OpenBatches is one run's open batches of one flight.
type OpenBatches struct {
	FlightID string `json:"flight_id"`
	RunID    string `json:"run_id"` // "" for batches journaled before leases existed
	Host     string `json:"host"`
	PID      int    `json:"pid"`
	Batches  int    `json:"batches"`
	Tiles    int    `json:"tiles"`
	// LeaseExpiresAt is null for batches journaled before leases existed.
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	Expired        bool       `json:"expired"`
}

// Flight is one flight's counts. Counts always has all five statuses.
type Flight struct {
	FlightID string           `json:"flight_id"`
	State    string           `json:"state"`
	Counts   map[string]int64 `json:"counts"`
	Total    int64            `json:"total"`
	// Runs are the flight's last upload-pending runs, newest first (at
	// most --runs); RunsTotal is how many the history holds.
	Runs      []UploadRun `json:"runs"`
	RunsTotal int64       `json:"runs_total"`
	// Zooms is the flight's progress per zoom level, lowest first; only
	// with --flight (absent otherwise: it reads every tile of a flight).
	Zooms *[]Zoom `json:"zooms,omitempty"`
}

// Zoom is one zoom level of a flight: upload-pending sends the lowest
// first (upload.order zoom), so these fill from the top of the list.
type Zoom struct {
	Z        int   `json:"z"`
	Uploaded int64 `json:"uploaded"`
	Total    int64 `json:"total"`
	Pending  int64 `json:"pending"` // pending or trusted: still to send
	GivenUp  int64 `json:"given_up"`
}

// UploadRun is one upload-pending run of a flight, from the run history. A run
// that has not recorded its end (still running, or killed) has finished
// false and null end fields; counts are null when not known.
type UploadRun struct {
	RunID      string     `json:"run_id"`
	Host       string     `json:"host"`
	PID        int        `json:"pid"`
	Version    string     `json:"version"`
	StartedAt  time.Time  `json:"started_at"`
	Finished   bool       `json:"finished"`
	FinishedAt *time.Time `json:"finished_at"`
	Outcome    *string    `json:"outcome"`
	ExitCode   *int       `json:"exit_code"`
	Accepted   *int       `json:"accepted"`
	Duplicate  *int       `json:"duplicate"`
	Rejected   *int       `json:"rejected"`
	GivenUp    *int       `json:"given_up"`
	Pending    *int       `json:"pending"`
	Bytes      *int64     `json:"bytes"`
	Error      *string    `json:"error"`
}

// GiveUp is one tile that ran out of upload attempts.
type GiveUp struct {
	TileID      string    `json:"tile_id"`
	FlightID    string    `json:"flight_id"`
	Attempts    int       `json:"attempts"`
	LastReason  string    `json:"last_reason"`
	LastMessage string    `json:"last_message"`
	GaveUpAt    time.Time `json:"gave_up_at"`
}

// NewCmdStatus is `status [--flight F] [-o table|json]`.
func NewCmdStatus(f *factory.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Store: func(ctx context.Context) (Store, error) { return f.Store(ctx) }}
	cmd := &cobra.Command{
		Use:   "status [--flight F] [-o text|json]",
		Short: "Show tile counts per flight and status, and given-up tiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := iostreams.CheckOutput(opts.Output); err != nil {
				return exitcode.UsageError(err)
			}
			if opts.Runs < 1 {
				return exitcode.UsageError(fmt.Errorf("--runs must be at least 1, got %d", opts.Runs))
			}
			if opts.Limit < 1 {
				return exitcode.UsageError(fmt.Errorf("--limit must be at least 1, got %d", opts.Limit))
			}
			if opts.FlightID != "" {
				if err := tilestore.ValidateFlightID(opts.FlightID); err != nil {
					return exitcode.UsageError(fmt.Errorf("--flight: %w", err))
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.FlightID, "flight", "", "only this flight")
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "text", "output format: text or json (table is text)")
	cmd.Flags().IntVar(&opts.Limit, "limit", 100, "list at most this many given-up tiles (newest first)")
	cmd.Flags().IntVar(&opts.Runs, "runs", 5, "list at most this many upload runs per flight (newest first; shown as text with --flight)")
	return cmd
}

// Run prints the status.
func Run(ctx context.Context, opts *Options) error {
	store, err := opts.Store(ctx)
	if err != nil {
		return err
	}
	counts, err := store.FlightCounts(ctx, opts.FlightID)
	if err != nil {
		return err
	}
	gus, err := store.GiveUps(ctx, opts.FlightID, opts.Limit)
	if err != nil {
		return err
	}
	limit := opts.Runs
	if limit < 1 {
		limit = 5
	}
	runs, totals, err := store.Runs(ctx, opts.FlightID, limit)
	if err != nil {
		return err
	}
	r := build(counts, gus)
	leases, err := store.Leases(ctx, opts.FlightID)
	if err != nil {
		return err
	}
	r.OpenBatches = openBatches(leases)
	addRuns(&r, runs, totals)
	if opts.FlightID != "" && len(r.Flights) == 1 {
		zs, err := store.ZoomProgress(ctx, opts.FlightID)
		if err != nil {
			return err
		}
		zooms := make([]Zoom, 0, len(zs))
		for _, z := range zs {
			zooms = append(zooms, Zoom{Z: z.Z, Uploaded: z.Uploaded, Total: z.Total, Pending: z.Pending, GivenUp: z.GivenUp})
		}
		r.Flights[0].Zooms = &zooms
	}
	if opts.Output == "json" {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	if err := printTable(opts.IO, r); err != nil {
		return err
	}
	if opts.FlightID == "" || len(r.Flights) != 1 {
		return nil
	}
	if err := printZooms(opts.IO, r.Flights[0]); err != nil {
		return err
	}
	return printRuns(opts.IO, r.Flights[0])
}

func build(counts []tilestore.FlightCounts, gus []tilestore.GiveUp) Report {
	r := Report{Flights: []Flight{}, GiveUps: []GiveUp{}}
	for _, fc := range counts {
		fl := Flight{FlightID: fc.FlightID, State: string(fc.State), Counts: map[string]int64{}, Runs: []UploadRun{}}
		for _, s := range tilestore.VotingStatuses {
			fl.Counts[string(s)] = fc.ByStatus[s]
			fl.Total += fc.ByStatus[s]
		}
		r.Flights = append(r.Flights, fl)
		r.GiveUpsTotal += fl.Counts[string(tilestore.StatusUploadGiveup)]
	}
	for _, g := range gus {
		r.GiveUps = append(r.GiveUps, GiveUp{TileID: g.TileID, FlightID: g.FlightID, Attempts: g.Attempts,
			LastReason: g.LastReason, LastMessage: g.LastMessage, GaveUpAt: g.GaveUpAt.UTC()})
	}
	return r
}

func openBatches(ls []tilestore.Lease) []OpenBatches {
	out := []OpenBatches{}
	for _, l := range ls {
		ob := OpenBatches{FlightID: l.FlightID, RunID: l.RunID, Host: l.Host, PID: l.PID, Batches: l.Batches,
			Tiles: l.Tiles, Expired: l.Expired}
		if l.ExpiresAt != nil {
			t := l.ExpiresAt.UTC()
			ob.LeaseExpiresAt = &t
		}
		out = append(out, ob)
	}
	return out
}

func printTable(io *iostreams.IOStreams, r Report) error {
	if len(r.Flights) == 0 {
		fmt.Fprintln(io.Out, "no flights (import one with 'tilectl tiles import --flight F DIR')")
		return nil
	}
	tw := tabwriter.NewWriter(io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLIGHT\tSTATE\tPENDING\tTRUSTED\tREJECTED\tUPLOADED\tGIVEN UP\tTOTAL")
	for _, f := range r.Flights {
		fmt.Fprintf(tw, "%s\t%s", f.FlightID, f.State)
		for _, s := range tilestore.VotingStatuses {
			fmt.Fprintf(tw, "\t%d", f.Counts[string(s)])
		}
		fmt.Fprintf(tw, "\t%d\n", f.Total)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printOpenBatches(io, r.OpenBatches); err != nil {
		return err
	}
	if len(r.GiveUps) == 0 {
		return nil
	}
	if int64(len(r.GiveUps)) < r.GiveUpsTotal {
		fmt.Fprintf(io.Out, "\nGiven up (showing %s of %s, newest first; --limit shows more):\n",
			thousands(int64(len(r.GiveUps))), thousands(r.GiveUpsTotal))
	} else {
		fmt.Fprintf(io.Out, "\nGiven up (%s, newest first):\n", thousands(int64(len(r.GiveUps))))
	}
	tw = tabwriter.NewWriter(io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TILE\tATTEMPTS\tLAST REASON\tGAVE UP AT")
	for _, g := range r.GiveUps {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", g.TileID, g.Attempts, g.LastReason, g.GaveUpAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func printOpenBatches(io *iostreams.IOStreams, obs []OpenBatches) error {
	if len(obs) == 0 {
		return nil
	}
	fmt.Fprintf(io.Out, "\nOpen batches (by upload run):\n")
	tw := tabwriter.NewWriter(io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLIGHT\tHOST\tPID\tRUN\tBATCHES\tTILES\tLEASE ENDS")
	for _, o := range obs {
		ends := "no lease (any run may settle them)"
		if o.LeaseExpiresAt != nil {
			ends = o.LeaseExpiresAt.Format(time.RFC3339)
			if o.Expired {
				ends += " (expired: the next run settles them)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", o.FlightID, o.Host, o.PID, o.RunID, o.Batches, o.Tiles, ends)
	}
	return tw.Flush()
}

// printZooms shows a flight's progress per zoom level, lowest first.
func printZooms(io *iostreams.IOStreams, f Flight) error {
	if f.Zooms == nil || len(*f.Zooms) == 0 {
		return nil
	}
	fmt.Fprintf(io.Out, "\nBy zoom level (sent lowest first):\n")
	tw := tabwriter.NewWriter(io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ZOOM\tUPLOADED\tPENDING\tGIVEN UP\tDONE")
	for _, z := range *f.Zooms {
		fmt.Fprintf(tw, "%d\t%s / %s\t%s\t%s\t%s\n", z.Z, thousands(z.Uploaded), thousands(z.Total),
			thousands(z.Pending), thousands(z.GivenUp), percent(z.Uploaded, z.Total))
	}
	return tw.Flush()
}

// percent is done of total, rounded down so that only a finished level
// shows 100%.
func percent(done, total int64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatInt(done*100/total, 10) + "%"
}

// thousands writes n with comma separators: 3,002.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
