package retrydecorator

import (
	"time"

	"github.com/tilectl/tilectl/uploader"
)

// aggregate sums the inner calls' reports into one. Adding a single report
// yields it unchanged, so a call that needed no retry returns the inner
// report as it came.
type aggregate struct {
	flightID string
	r        uploader.Report
	calls    int
	givenUp  int // give-ups counted by the decorator
	// fdrRecords and fdrBytes are the give-up records the decorator wrote.
	fdrRecords int
	fdrBytes   int64
	at         map[string]int // tile ID -> index in r.Rejections
	local      map[string]bool
}

// addLocal keeps each tile left pending for its blob once, however many
// inner calls found it: a retry checks it again and finds it bad again.
func (a *aggregate) addLocal(rep uploader.Report, first bool) {
	if a.local == nil {
		a.local = map[string]bool{}
	}
	if first {
		a.r.LocalFailures, a.r.LocalFailed = nil, 0
	}
	for _, lf := range rep.LocalFailures {
		if a.local[lf.TileID] {
			continue
		}
		a.local[lf.TileID] = true
		a.r.LocalFailures = append(a.r.LocalFailures, lf)
	}
	// Unlisted ones (past the report's cap) cannot be told apart: the
	// largest single count is the best lower bound.
	a.r.LocalFailed = max(a.r.LocalFailed, rep.LocalFailed, len(a.r.LocalFailures))
}

func (a *aggregate) add(rep uploader.Report) {
	a.calls++
	if a.calls == 1 {
		a.r = rep
		a.at = make(map[string]int, len(rep.Rejections))
		for i, pt := range rep.Rejections {
			a.at[pt.TileID] = i
		}
		a.addLocal(rep, true)
		return
	}
	r := &a.r
	r.Outcome = rep.Outcome
	r.Accepted += rep.Accepted
	r.Duplicate += rep.Duplicate
	r.Rejected += rep.Rejected
	r.GivenUp += rep.GivenUp
	r.Pending, r.PendingBytes = rep.Pending, rep.PendingBytes
	r.Held = rep.Held
	r.Bytes += rep.Bytes
	r.Batches += rep.Batches
	r.Resends += rep.Resends
	r.Replayed += rep.Replayed
	r.Timeouts += rep.Timeouts
	if rep.Concurrency > 0 {
		r.Concurrency = rep.Concurrency // the limit in force as the last call that sent ended
	}
	// What waits, and when the work left may go on, are the last call's.
	r.Waiting, r.NextRetryAt, r.WaitsBehind = rep.Waiting, rep.NextRetryAt, rep.WaitsBehind
	a.addLocal(rep, false)
	r.Traffic.Add(rep.Traffic)
	if r.Started.IsZero() {
		r.Started = rep.Started
	}
	if !rep.Finished.IsZero() {
		r.Finished = rep.Finished
	}
	// A tile rejected on every retry is listed once, with its latest reason,
	// so the list stays as long as the set of rejected tiles.
	for _, pt := range rep.Rejections {
		if i, ok := a.at[pt.TileID]; ok {
			r.Rejections[i] = pt
			continue
		}
		a.at[pt.TileID] = len(r.Rejections)
		r.Rejections = append(r.Rejections, pt)
	}
}

// report is the aggregate as it stands.
func (a *aggregate) report() uploader.Report {
	r := a.r
	if r.FlightID == "" {
		r.FlightID = a.flightID
	}
	r.GivenUp += a.givenUp
	r.FDRRecords += a.fdrRecords
	r.FDRBytes += a.fdrBytes
	return r
}

// finalReport is the report of a call that ended on a partial inner outcome:
// success only if nothing is left pending and nothing was given up.
func (a *aggregate) finalReport() uploader.Report {
	r := a.report()
	if r.Pending == 0 && r.GivenUp == 0 {
		r.Outcome = uploader.OutcomeSuccess
	} else {
		r.Outcome = uploader.OutcomePartial
	}
	return r
}

// fail is the report of a call that ended on an error.
func (a *aggregate) fail(now time.Time) uploader.Report {
	r := a.report()
	r.Outcome = uploader.OutcomeFailure
	if r.Started.IsZero() {
		r.Started = now
	}
	if r.Finished.IsZero() || r.Finished.Before(now) {
		r.Finished = now
	}
	return r
}
