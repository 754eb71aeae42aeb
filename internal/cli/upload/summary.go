package upload

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/tilectl/tilectl/internal/iostreams"
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
//	accepted, duplicate, given_up
//	                    tile counts
//	rejected            rejection events: a tile rejected on two passes
//	                    counts twice
//	rejected_tiles      tiles rejected at least once in the run
//	still_pending       tiles still waiting for upload after the run, or
//	                    null when the run could not count them (the
//	                    database stopped answering, or the run failed
//	                    before it started): never a 0 it does not know
//	still_pending_bytes their bytes, or null likewise
//	retries             in-call retries made by the decorator
//	batches, bytes      batches answered and bytes sent (dry run: would send)
//	resends, replayed, timeouts
//	                    transport resends, replayed answers, timed-out attempts
//	held_by_other_runs  (per flight) tiles in open batches of other live runs
//	                    as the run ended (the run's deadline came while it
//	                    waited for them): still pending, and counted in
//	                    still_pending
//	held_until          (per flight) when the last of those leases ends, or
//	                    null
//	held_by             (per flight) those runs, each with run_id, host, pid,
//	                    tiles and lease_ends (RFC 3339); [] when none.
//	                    next_retry_at is then the earliest lease_ends
//	local_failed        tiles not sent because their cached blob is missing,
//	                    unreadable, of the wrong size or sha256: still
//	                    pending, no attempt counted (dry run: missing or
//	                    of the wrong size)
//	local_failures      those tiles (at most 1000 per flight), each with
//	                    flight_id, tile_id, cache_path, problem
//	                    (blob_missing, blob_unreadable, blob_wrong_size,
//	                    blob_wrong_sha256) and message; [] when none
//	requests, first_attempts, resends_refused, breaker_openings
//	                    HTTP requests sent (resends and GETs included), those
//	                    that were not resends, resends the retry budget
//	                    refused, times the circuit breaker opened
//	concurrency         the limit on batches in flight as the run ended
//	                    (upload.concurrency auto: what it measured); in the
//	                    totals the highest of the flights'; 0 when none sent
//	rate_bytes_per_second
//	                    bytes sent per second of the run's upload time
//	                    (per flight: of its own), or null when not known
//	                    (a dry run, or no time measured): never a made-up 0
//	sli                 the run's retry indicators (see SLI)
//	next_retry_at       RFC 3339 hint for the next run, or null
//	error               the run-level error message, or null
//	fdr                 what the run wrote to the flight data recorder
//	                    (FDRSummary), or null without the retry decorator
//	flights             one object per flight, in order, with flight_id,
//	                    outcome ("interrupted" for the flight a signal
//	                    reached), the counts above, next_retry_at, error,
//	                    started, finished, elapsed_seconds and
//	                    give_ups_awaiting_review (every upload_giveup tile of
//	                    the flight after the run; null if not counted)
//
// A run that fails before it has a summary (reportEarlyFailure) prints the
// same object with outcome "failure" (or "interrupted"), exit_code and
// error, no flights, and null for what it did not count.
type Summary struct {
	Outcome        string          `json:"outcome"`
	ExitCode       int             `json:"exit_code"`
	DryRun         bool            `json:"dry_run"`
	RetryDecorator bool            `json:"retry_decorator"`
	Counts                         // the totals
	LocalFailures  []LocalFailure  `json:"local_failures"`
	Rate           *float64        `json:"rate_bytes_per_second"`
	SLI            SLI             `json:"sli"`
	NextRetryAt    *time.Time      `json:"next_retry_at"`
	Error          *string         `json:"error"`
	Flights        []FlightSummary `json:"flights"`
	// Interrupted: SIGINT or SIGTERM ended the run (outcome "interrupted").
	Interrupted bool `json:"-"`
	// FDR is what the run wrote to the flight data recorder: see FDRSummary.
	FDR *FDRSummary `json:"fdr"`
}

// LocalFailure is a tile left pending because of its cached blob.
type LocalFailure struct {
	FlightID string `json:"flight_id"`
	uploader.LocalFailure
}

// Counts are the per-flight and total tile counts.
type Counts struct {
	Uploaded          int    `json:"uploaded"`
	Accepted          int    `json:"accepted"`
	Duplicate         int    `json:"duplicate"`
	Rejected          int    `json:"rejected"`
	RejectedTiles     int    `json:"rejected_tiles"`
	GivenUp           int    `json:"given_up"`
	StillPending      *int   `json:"still_pending"`       // nil: not known, never 0
	StillPendingBytes *int64 `json:"still_pending_bytes"` // nil: not known
	Retries           int    `json:"retries"`
	Batches           int    `json:"batches"`
	Bytes             int64  `json:"bytes"`
	Resends           int    `json:"resends"`
	Replayed          int    `json:"replayed"`
	Timeouts          int    `json:"timeouts"`
	LocalFailed       int    `json:"local_failed"`
	Requests          int    `json:"requests"`
	FirstAttempts     int    `json:"first_attempts"`
	ResendsRefused    int    `json:"resends_refused"`
	BreakerOpenings   int    `json:"breaker_openings"`
	// Concurrency is the limit on batches in flight as the flight's run
	// ended (upload.concurrency: adaptive or fixed); in the totals, the
	// highest of the flights'. 0 when nothing was sent.
	Concurrency int `json:"concurrency"`
}

func (c *Counts) add(o Counts) {
	c.Uploaded += o.Uploaded
	c.Accepted += o.Accepted
	c.Duplicate += o.Duplicate
	c.Rejected += o.Rejected
	c.RejectedTiles += o.RejectedTiles
	c.GivenUp += o.GivenUp
	c.StillPending = sumKnown(c.StillPending, o.StillPending)
	c.StillPendingBytes = sumKnown(c.StillPendingBytes, o.StillPendingBytes)
	c.Retries += o.Retries
	c.Batches += o.Batches
	c.Bytes += o.Bytes
	c.Resends += o.Resends
	c.Replayed += o.Replayed
	c.Timeouts += o.Timeouts
	c.LocalFailed += o.LocalFailed
	c.Requests += o.Requests
	c.FirstAttempts += o.FirstAttempts
	c.ResendsRefused += o.ResendsRefused
	c.BreakerOpenings += o.BreakerOpenings
	c.Concurrency = max(c.Concurrency, o.Concurrency)
}

// knownCounts are the counts of a run that counted what is left: none yet.
func knownCounts() Counts { return Counts{StillPending: new(0), StillPendingBytes: new(int64(0))} }

// sumKnown is a + b, or nil (not known) when either is not known.
func sumKnown[T int | int64](a, b *T) *T {
	if a == nil || b == nil {
		return nil
	}
	s := *a + *b
	return &s
}

// countText is n in words for the text summary: "unknown" when nil.
func countText[T int | int64](n *T) string {
	if n == nil {
		return "unknown"
	}
	return fmt.Sprint(*n)
}

// knownCount is iostreams.Count of a count the run may not know.
func knownCount[T int | int64](n *T, one, many string) string {
	if n == nil {
		return "an unknown number of " + many
	}
	return iostreams.Count(*n, one, many)
}

// pendingLeft: tiles may be left, as far as the run knows (an unknown
// count may hide some).
func (c Counts) pendingLeft() bool { return c.StillPending == nil || *c.StillPending > 0 }

// FlightSummary is one flight's part of the run.
type FlightSummary struct {
	FlightID string `json:"flight_id"`
	Outcome  string `json:"outcome"`
	Counts
	HeldByOtherRuns int               `json:"held_by_other_runs"`
	HeldUntil       *time.Time        `json:"held_until"`
	HeldBy          []uploader.Holder `json:"held_by"`
	NextRetryAt     *time.Time        `json:"next_retry_at"`
	Error           *string           `json:"error"`
	Started         time.Time         `json:"started"`
	Finished        time.Time         `json:"finished"`
	// ElapsedSeconds is Finished - Started.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Rate is Bytes / ElapsedSeconds; nil when not known.
	Rate *float64 `json:"rate_bytes_per_second"`
	// GiveUpsAwaitingReview is every tile of the flight in upload_giveup
	// after the run, this run's and earlier ones'; null when it could not
	// be counted.
	GiveUpsAwaitingReview *int64 `json:"give_ups_awaiting_review"`

	localFailures []LocalFailure // gathered into Summary.LocalFailures
	fdrRecords    int            // give-up records the decorator wrote (Summary.FDR)
	fdrBytes      int64
}

// flightSummary is rep as the summary shows it; pending and pendingBytes
// are what the run counted left after it, nil when it could not count.
func flightSummary(rep uploader.Report, pending *int, pendingBytes *int64, err error, dryRun bool) FlightSummary {
	fs := FlightSummary{
		FlightID: rep.FlightID,
		Outcome:  string(rep.Outcome),
		Counts: Counts{
			Uploaded: rep.Uploaded(), Accepted: rep.Accepted, Duplicate: rep.Duplicate,
			Rejected: rep.Rejected, RejectedTiles: len(rep.Rejections), GivenUp: rep.GivenUp, StillPending: pending,
			StillPendingBytes: pendingBytes, Retries: rep.RetryCount, Batches: rep.Batches,
			Bytes: rep.Bytes, Resends: rep.Resends, Replayed: rep.Replayed, Timeouts: rep.Timeouts,
			LocalFailed: rep.LocalFailed,
			Requests:    rep.Requests, FirstAttempts: rep.FirstAttempts, ResendsRefused: rep.ResendsRefused,
			BreakerOpenings: rep.BreakerOpenings, Concurrency: rep.Concurrency,
		},
		HeldBy:      []uploader.Holder{},
		NextRetryAt: rep.NextRetryAt,
		Started:     rep.Started,
		Finished:    rep.Finished,
		fdrRecords:  rep.FDRRecords,
		fdrBytes:    rep.FDRBytes,
	}
	for _, lf := range rep.LocalFailures {
		fs.localFailures = append(fs.localFailures, LocalFailure{FlightID: rep.FlightID, LocalFailure: lf})
	}
	if !rep.Started.IsZero() && rep.Finished.After(rep.Started) {
		fs.ElapsedSeconds = rep.Finished.Sub(rep.Started).Seconds()
		if !dryRun {
			fs.Rate = new(math.Round(float64(fs.Bytes) / fs.ElapsedSeconds))
		}
	}
	switch {
	case err != nil:
		fs.Outcome = string(uploader.OutcomeFailure)
		msg := err.Error()
		fs.Error = &msg
	case dryRun:
		fs.Outcome = "dry_run"
	case fs.pendingLeft() || rep.GivenUp > 0:
		fs.Outcome = string(uploader.OutcomePartial)
	default:
		fs.Outcome = string(uploader.OutcomeSuccess)
	}
	return fs
}

// holdBy records the runs that still held some of the flight's tiles as
// the run ended: they are pending (b's tiles are in StillPending), and the
// next run may take them over no sooner than the first lease ends.
func (f *FlightSummary) holdBy(b uploader.Held) {
	if b.Tiles == 0 {
		return
	}
	f.HeldByOtherRuns, f.HeldBy = b.Tiles, b.Holders
	for _, h := range b.Holders {
		if f.HeldUntil == nil || h.LeaseEnds.After(*f.HeldUntil) {
			until := h.LeaseEnds
			f.HeldUntil = &until
		}
	}
	if f.NextRetryAt == nil {
		until := b.Until
		f.NextRetryAt = &until
	}
	if f.Outcome == string(uploader.OutcomeSuccess) {
		f.Outcome = string(uploader.OutcomePartial)
	}
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
			if f.LocalFailed > 0 {
				p("flight %s (dry run): %s blob problems and would not be sent:\n", f.FlightID, iostreams.Count(f.LocalFailed, "tile has", "tiles have"))
				writeLocalFailures(p, f.localFailures)
				p("  the other %s, %s, would be sent in %s; nothing was sent or changed\n",
					knownCount(f.StillPending, "tile", "tiles"), iostreams.HumanBytes(f.Bytes), iostreams.Count(f.Batches, "batch", "batches"))
				continue
			}
			p("flight %s (dry run): would send %s, %s, in %s; nothing was sent or changed\n",
				f.FlightID, knownCount(f.StillPending, "tile", "tiles"), iostreams.HumanBytes(f.Bytes), iostreams.Count(f.Batches, "batch", "batches"))
			continue
		}
		elapsed := f.Finished.Sub(f.Started)
		p("flight %s: %s in %s: %d uploaded (%d accepted, %d duplicate), %d given up, %s\n",
			f.FlightID, f.Outcome, iostreams.HumanDuration(elapsed), f.Uploaded, f.Accepted, f.Duplicate,
			f.GivenUp, pendingText(f.Counts))
		// Events, then the tiles behind them: "12 rejections (5 tiles)".
		batches := iostreams.Count(f.Batches, "batch", "batches")
		p("  %s (%s); %s; %s sent%s\n", plural(f.Rejected, "rejection"), plural(f.RejectedTiles, "tile"), batches,
			iostreams.HumanBytes(f.Bytes), rates(f, elapsed))
		if left := timeLeft(f); left != "" {
			p("  %s\n", left)
		}
		if f.LocalFailed > 0 {
			p("  %s not sent because of their cached blob (still pending, no attempt counted):\n", iostreams.Count(f.LocalFailed, "tile", "tiles"))
			writeLocalFailures(p, f.localFailures)
		}
		if f.GiveUpsAwaitingReview != nil && *f.GiveUpsAwaitingReview > 0 {
			earlier := max(*f.GiveUpsAwaitingReview-int64(f.GivenUp), 0)
			p("  %s review (%d from earlier runs)\n", iostreams.Count(*f.GiveUpsAwaitingReview,
				"given-up tile of this flight awaits", "given-up tiles of this flight await"), earlier)
		}
		for _, h := range f.HeldBy {
			p("  %s held by run %s (%s, pid %d), whose lease ends %s: still pending until it settles them\n",
				iostreams.Count(h.Tiles, "tile is", "tiles are"), h.RunID, h.Host, h.PID, h.LeaseEnds.UTC().Format(time.RFC3339))
		}
		// The run's own error is printed once, on stderr, as the command
		// ends; a flight's other error is printed here.
		if f.Error != nil && (s.Error == nil || *f.Error != *s.Error) {
			p("  error: %s\n", *f.Error)
		}
		if next := nextStep(s, f); next != "" {
			p("  next: %s\n", next)
		}
	}
	if len(s.Flights) == 0 {
		p("no on_ground flight has pending tiles\n")
	}
	if len(s.Flights) > 1 {
		p("total: %s: %d uploaded, %d given up, %s; %s, %s, %s sent\n",
			s.Outcome, s.Uploaded, s.GivenUp, pendingText(s.Counts), plural(s.Rejected, "rejection"),
			iostreams.Count(s.Retries, "retry", "retries"), iostreams.HumanBytes(s.Bytes))
	}
	if f := s.FDR; f != nil && f.RingTooSmall {
		p("flight data recorder too small: this run wrote %s (%d bytes) to %s, whose ring holds %d bytes, "+
			"so its oldest records were overwritten (each was in the ring when its give-up was committed); "+
			"set fdr_capacity_bytes to %d and move the old ring file aside (a ring's size is fixed when its file is created)\n",
			iostreams.Count(f.Records, "give-up record", "give-up records"), f.Bytes, f.Path, f.CapacityBytes, *f.SuggestedCapacityBytes)
	}
	return err
}

// runRate is the run's bytes per second over its flights' upload time,
// nil when no flight measured its time.
func runRate(flights []FlightSummary) *float64 {
	var bytes int64
	var secs float64
	for _, f := range flights {
		if f.Rate != nil {
			bytes, secs = bytes+f.Bytes, secs+f.ElapsedSeconds
		}
	}
	if secs <= 0 {
		return nil
	}
	return new(math.Round(float64(bytes) / secs))
}

// pendingText is "N still pending (SIZE)", or "still pending: unknown"
// when the run could not count them.
func pendingText(c Counts) string {
	if c.StillPending == nil {
		return "still pending: unknown"
	}
	size := "unknown size"
	if c.StillPendingBytes != nil {
		size = iostreams.HumanBytes(*c.StillPendingBytes)
	}
	return fmt.Sprintf("%d still pending (%s)", *c.StillPending, size)
}

func writeLocalFailures(p func(string, ...any), lfs []LocalFailure) {
	for _, lf := range lfs {
		p("    %s  %s  %s: %s\n", lf.TileID, lf.Problem, lf.CachePath, lf.Message)
	}
}

func rates(f FlightSummary, elapsed time.Duration) string {
	if elapsed <= 0 || f.Uploaded == 0 {
		return ""
	}
	sec := elapsed.Seconds()
	return fmt.Sprintf(" at %s/s, %.1f tiles/s", iostreams.HumanBytes(int64(float64(f.Bytes)/sec)), float64(f.Uploaded)/sec)
}

// timeLeft is, for a flight with bytes still pending, how long they would
// take at this run's rate; "" when nothing is left or the rate is not known.
func timeLeft(f FlightSummary) string {
	if f.Rate == nil || *f.Rate <= 0 || f.StillPendingBytes == nil || *f.StillPendingBytes <= 0 {
		return ""
	}
	d := time.Duration(float64(*f.StillPendingBytes) / *f.Rate * float64(time.Second)).Round(time.Second)
	return fmt.Sprintf("the %s still pending would take about %s at this run's rate", iostreams.HumanBytes(*f.StillPendingBytes), iostreams.HumanDuration(d))
}

// plural is n and a noun whose plural adds an s.
func plural(n int, noun string) string { return iostreams.Count(n, noun, noun+"s") }

// nextStep is what the operator does now, or "" when nothing is left.
func nextStep(s *Summary, f FlightSummary) string {
	switch {
	case s.Interrupted:
		return "run upload-pending again to continue"
	case f.LocalFailed > 0:
		return fmt.Sprintf("mend the bad blobs: tilectl tiles verify --flight %s, then tilectl tiles import --flight %s DIR with the original directory", f.FlightID, f.FlightID)
	case f.GivenUp > 0 || (f.GiveUpsAwaitingReview != nil && *f.GiveUpsAwaitingReview > 0):
		return fmt.Sprintf("review the given-up tiles: tilectl status --flight %s", f.FlightID)
	case f.pendingLeft() && f.NextRetryAt != nil:
		return "run upload-pending again after " + f.NextRetryAt.Format(time.RFC3339) + " (a timer that runs it periodically does this)"
	case f.pendingLeft() && f.Error == nil:
		return "run upload-pending again"
	}
	return ""
}
