package upload

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/tilectl/tilectl/uploader"
)

// Summary is the result of one upload-pending run. `-o json` prints it as
// one JSON object on stdout. The field names are a stable interface: new
// fields may be added, none is renamed or removed. It never holds the token.
//
//	outcome             "success" (everything sent is uploaded, nothing left),
//	                    "partial" (tiles still pending or given up),
//	                    "failure" (a run-level error), "dry_run",
//	                    "interrupted" (SIGINT or SIGTERM; batches in flight
//	                    were settled, the rest is still pending)
//	exit_code           the process's exit code (0, 1, 3, 4, 130 or 143)
//	dry_run             true with --dry-run: nothing was sent or changed
//	retry_decorator     false with --no-retry or upload.disable_retry_decorator
//	uploaded            accepted + duplicate: tiles now safely at the provider
//	accepted, duplicate, rejected, given_up
//	                    tile counts (rejected counts each rejection, so a tile
//	                    rejected on two passes counts twice)
//	still_pending       tiles still waiting for upload after the run
//	still_pending_bytes their bytes
//	retries             in-call retries made by the decorator
//	batches, bytes      batches answered and bytes sent (dry run: would send)
//	resends, replayed, timeouts
//	                    transport resends, replayed answers, timed-out attempts
//	held_by_other_runs  (per flight) tiles in open batches of other runs whose
//	                    lease has not ended: theirs to finish, not pending here
//	held_until          (per flight) when the last of those leases ends, or
//	                    null; if that run died, a run after it finishes them
//	next_retry_at       RFC 3339 hint for the next run, or null
//	error               the run-level error message, or null
//	flights             one object per flight, in order, with flight_id,
//	                    outcome, the counts above, next_retry_at, error,
//	                    started and finished
type Summary struct {
	Outcome        string          `json:"outcome"`
	ExitCode       int             `json:"exit_code"`
	DryRun         bool            `json:"dry_run"`
	RetryDecorator bool            `json:"retry_decorator"`
	Counts                         // the totals
	NextRetryAt    *time.Time      `json:"next_retry_at"`
	Error          *string         `json:"error"`
	Flights        []FlightSummary `json:"flights"`
	// Interrupted: SIGINT or SIGTERM ended the run (outcome "interrupted").
	Interrupted bool `json:"-"`
}

// Counts are the per-flight and total tile counts.
type Counts struct {
	Uploaded          int   `json:"uploaded"`
	Accepted          int   `json:"accepted"`
	Duplicate         int   `json:"duplicate"`
	Rejected          int   `json:"rejected"`
	GivenUp           int   `json:"given_up"`
	StillPending      int   `json:"still_pending"`
	StillPendingBytes int64 `json:"still_pending_bytes"`
	Retries           int   `json:"retries"`
	Batches           int   `json:"batches"`
	Bytes             int64 `json:"bytes"`
	Resends           int   `json:"resends"`
	Replayed          int   `json:"replayed"`
	Timeouts          int   `json:"timeouts"`
}

func (c *Counts) add(o Counts) {
	c.Uploaded += o.Uploaded
	c.Accepted += o.Accepted
	c.Duplicate += o.Duplicate
	c.Rejected += o.Rejected
	c.GivenUp += o.GivenUp
	c.StillPending += o.StillPending
	c.StillPendingBytes += o.StillPendingBytes
	c.Retries += o.Retries
	c.Batches += o.Batches
	c.Bytes += o.Bytes
	c.Resends += o.Resends
	c.Replayed += o.Replayed
	c.Timeouts += o.Timeouts
}

// FlightSummary is one flight's part of the run.
type FlightSummary struct {
	FlightID string `json:"flight_id"`
	Outcome  string `json:"outcome"`
	Counts
	HeldByOtherRuns int        `json:"held_by_other_runs"`
	HeldUntil       *time.Time `json:"held_until"`
	NextRetryAt     *time.Time `json:"next_retry_at"`
	Error           *string    `json:"error"`
	Started         time.Time  `json:"started"`
	Finished        time.Time  `json:"finished"`
}

func flightSummary(rep uploader.UploadBatchReport, pendingBytes int64, err error, dryRun bool) FlightSummary {
	fs := FlightSummary{
		FlightID: rep.FlightID,
		Outcome:  string(rep.Outcome),
		Counts: Counts{
			Uploaded: rep.Uploaded(), Accepted: rep.Accepted, Duplicate: rep.Duplicate,
			Rejected: rep.Rejected, GivenUp: rep.GivenUp, StillPending: rep.Pending,
			StillPendingBytes: pendingBytes, Retries: rep.RetryCount, Batches: rep.Batches,
			Bytes: rep.Bytes, Resends: rep.Resends, Replayed: rep.Replayed, Timeouts: rep.Timeouts,
		},
		NextRetryAt: rep.NextRetryAt,
		Started:     rep.Started,
		Finished:    rep.Finished,
	}
	switch {
	case err != nil:
		fs.Outcome = string(uploader.OutcomeFailure)
		msg := err.Error()
		fs.Error = &msg
	case dryRun:
		fs.Outcome = "dry_run"
	case rep.Pending > 0 || rep.GivenUp > 0:
		fs.Outcome = string(uploader.OutcomePartial)
	default:
		fs.Outcome = string(uploader.OutcomeSuccess)
	}
	return fs
}

func (s *Summary) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

func (s *Summary) writeText(w io.Writer) error {
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	for _, f := range s.Flights {
		if s.DryRun && f.Error == nil {
			p("flight %s (dry run): would send %d tiles, %d bytes, in %d batches; nothing was sent or changed\n",
				f.FlightID, f.StillPending, f.Bytes, f.Batches)
			continue
		}
		p("flight %s: %s: %d uploaded (%d accepted, %d duplicate), %d rejected, %d given up, %d still pending; %d retries, %d batches, %d bytes\n",
			f.FlightID, f.Outcome, f.Uploaded, f.Accepted, f.Duplicate, f.Rejected, f.GivenUp, f.StillPending,
			f.Retries, f.Batches, f.Bytes)
		if f.Error != nil {
			p("  error: %s\n", *f.Error)
		}
		if f.NextRetryAt != nil {
			p("  run upload-pending again after %s\n", f.NextRetryAt.Format(time.RFC3339))
		}
		if f.HeldByOtherRuns > 0 && f.HeldUntil != nil {
			p("  %d tiles are in batches of other runs (see 'tilectl status'); if those runs died, a run after %s finishes them\n",
				f.HeldByOtherRuns, f.HeldUntil.UTC().Format(time.RFC3339))
		}
	}
	if len(s.Flights) == 0 {
		p("no on_ground flight has pending tiles\n")
	}
	if len(s.Flights) > 1 {
		p("total: %s: %d uploaded, %d rejected, %d given up, %d still pending, %d retries\n",
			s.Outcome, s.Uploaded, s.Rejected, s.GivenUp, s.StillPending, s.Retries)
	}
	if s.GivenUp > 0 {
		p("given-up tiles need human review: see 'tilectl status' and the flight data recorder\n")
	}
	return err
}
