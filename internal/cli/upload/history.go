package upload

import (
	"context"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// historyTimeout bounds one write to the run history: a run that was
// interrupted, or whose deadline passed, still records its end.
const historyTimeout = 5 * time.Second

// startRun records in the run history that this run started flight id.
// The history is a record, not the job: a failed write is a WARN and the
// upload goes on (its end is then not written either).
func (r *run) startRun(ctx context.Context, id string, started time.Time) {
	// The run's own ID, host and pid: the same as on its batch claims, so
	// the history joins upload_batches.
	me := r.store.Run()
	row := tilestore.UploadRun{RunID: me.ID, FlightID: id, Host: me.Host, PID: me.PID,
		Version: r.opts.Version, StartedAt: started}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyTimeout)
	defer cancel()
	if err := r.store.StartRun(hctx, row); err != nil {
		r.log.Warn().Err(err).Str("flight", id).Str("run_id", me.ID).
			Msg("run history: could not record this run's start; the upload goes on")
		return
	}
	r.history = append(r.history, row)
}

// endRuns writes the end of every flight this run recorded a start for:
// the flight's outcome ("interrupted" when a signal ended the run), the
// run's exit code, the flight's counts and its error (else the run's).
func (r *run) endRuns(sum *Summary) {
	if len(r.history) == 0 {
		return
	}
	byFlight := map[string]*FlightSummary{}
	for i := range sum.Flights {
		byFlight[sum.Flights[i].FlightID] = &sum.Flights[i]
	}
	now := r.opts.Clock.Now()
	exit := sum.ExitCode
	for _, row := range r.history {
		row.FinishedAt, row.ExitCode = &now, &exit
		outcome := sum.Outcome
		row.Error = sum.Error
		if fs := byFlight[row.FlightID]; fs != nil {
			if !sum.Interrupted && fs.Outcome != "" {
				outcome = fs.Outcome
			}
			c := fs.Counts
			row.Accepted, row.Duplicate, row.Rejected = &c.Accepted, &c.Duplicate, &c.Rejected
			row.GivenUp, row.Pending, row.Bytes = &c.GivenUp, c.StillPending, &c.Bytes // Pending nil: not known
			if fs.Error != nil {
				row.Error = fs.Error
			}
		}
		row.Outcome = &outcome
		ctx, cancel := context.WithTimeout(context.Background(), historyTimeout)
		if err := r.store.FinishRun(ctx, row); err != nil {
			e := r.log.Warn().Str("flight", row.FlightID).Str("run_id", row.RunID)
			if !databaseLost(err) { // the run's error says that once
				e = e.Err(err)
			}
			e.Msg("run history: could not record this run's end; it will show as unfinished")
		}
		cancel()
	}
}
