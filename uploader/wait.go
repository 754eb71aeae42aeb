package uploader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// This file is the one place that decides when a run's remaining work is
// blocked until a time it cannot change, and says so: the report's Waiting
// list, UploadBatchReport.Blocked (which the retry decorator and the
// summary read), the announcement of each wait, and the settling of batches
// an earlier run left waiting.

// WaitReason says why work waits.
type WaitReason string

// WaitProviderAdvice: the provider asked the batch to wait (Retry-After in
// seconds or as an HTTP date, or the retry extension's "after"); the
// batch's not-before is journaled with it (Store.DeferBatch).
const WaitProviderAdvice WaitReason = "provider_advice"

// MaxAdvisedWait is the longest wait a provider's advice is kept for. A
// longer one (a Unix time sent as seconds, a typo in minutes) is cut to it
// so that no answer strands a batch for years; a provider that still
// wants more says so again when the batch goes after it.
const MaxAdvisedWait = time.Hour

// Wait is remaining work that may not go on before Until.
type Wait struct {
	Reason WaitReason `json:"reason"`
	OpID   string     `json:"op_id,omitempty"` // the batch that waits
	Tiles  int        `json:"tiles"`
	// Until is when the work may go on: for provider advice, the batch's
	// journaled not-before (the database's clock).
	Until time.Time `json:"until"`
	// Detail says who asked for the wait and how ("503 UNAVAILABLE asked
	// for 1m0s").
	Detail string `json:"detail,omitempty"`
	// PastDeadline: Until comes after the run's deadline, so this run does
	// not wait for it; the batch stays open for a later run.
	PastDeadline bool `json:"past_deadline"`
}

// Blocked reports the earliest time the work a report leaves waiting
// (Waiting) may go on (zero when none waits), and whether all of the
// flight's pending work waits: every pending tile is in a waiting batch or
// was left for its bad cached blob. A run that is all blocked ends (exit
// 3, next_retry_at = until) instead of retrying what cannot go yet.
func (r UploadBatchReport) Blocked() (until time.Time, all bool) {
	tiles := 0
	for _, w := range r.Waiting {
		tiles += w.Tiles
		if until.IsZero() || w.Until.Before(until) {
			until = w.Until
		}
	}
	return until, tiles > 0 && r.Pending > 0 && r.Pending <= tiles+r.LocalFailed
}

// errWaiting: the batch waits for the provider's advised time, which comes
// after the run's deadline; it stays open. It does not end the run.
var errWaiting = errors.New("batch waits for the provider's advised time")

// leftOpen reports whether err leaves a batch open without ending the run.
func leftOpen(err error) bool { return errors.Is(err, errLeftOpen) || errors.Is(err, errWaiting) }

// adviceDetail says what asked for a wait, for logs and the report.
func adviceDetail(adv operation.Advice, journaled time.Duration) string {
	s := fmt.Sprintf("%d %s asked for %s", adv.Status, adv.Code, adv.MinDelay.Round(time.Millisecond))
	if journaled < adv.MinDelay {
		s += fmt.Sprintf(", kept for %s at most", journaled)
	}
	return s
}

// fitsDeadline reports whether a wait of d from now ends before ctx's
// deadline, as operation.Advice.Bound decides it.
func (u *HTTPTileUploader) fitsDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || d < dl.Sub(u.now())
}

// announce says, when a wait starts, what waits and until when: a log
// line, and Request.Waiting for the status line.
func (u *HTTPTileUploader) announce(ctx context.Context, w Wait) {
	e, msg := u.log.Info(), "waiting until the provider's advised time before sending the batch again"
	if w.PastDeadline {
		e, msg = u.log.Warn(), "the provider's advised time for the batch comes after this run's deadline: "+
			"it stays open, and no run sends it before then"
	}
	e.Str("op_id", w.OpID).Int("tiles", w.Tiles).Time("until", w.Until).Str("advice", w.Detail).Msg(msg)
	if t := tallyOf(ctx); t != nil {
		t.announced(w)
	}
}

// splitWaiting returns the open batches whose advised time has not come
// (by the database's clock, when they were read) apart from the others.
func splitWaiting(open []tilestore.Batch) (now, waiting []tilestore.Batch) {
	for _, b := range open {
		if b.NotBefore != nil && b.NotBeforeIn > 0 {
			waiting = append(waiting, b)
		} else {
			now = append(now, b)
		}
	}
	return now, waiting
}

// waitingBatches are adopted open batches whose advised time had not come
// when the database read them.
type waitingBatches struct {
	batches []tilestore.Batch
	read    time.Time // when they were read: each NotBeforeIn counts from it
}

// settleWhenDue settles the open batches an earlier run left waiting for
// the provider's advised time, each once its time comes, while this run's
// workers send new batches; one whose time comes after the run's deadline
// is not waited for: it stays open, listed in the report's Waiting.
func (u *HTTPTileUploader) settleWhenDue(ctx context.Context, flightID string, wb waitingBatches, t *tally) error {
	if len(wb.batches) == 0 {
		return nil
	}
	waiting, read := slices.Clone(wb.batches), wb.read
	slices.SortStableFunc(waiting, func(a, b tilestore.Batch) int { return int(a.NotBeforeIn - b.NotBeforeIn) })
	members, err := u.loadMembers(ctx, flightID, waiting)
	if err != nil {
		return err
	}
	for _, b := range waiting {
		left := b.NotBeforeIn - u.now().Sub(read)
		w := Wait{Reason: WaitProviderAdvice, OpID: b.OpID, Tiles: len(b.TileIDs), Until: *b.NotBefore,
			Detail: "advised when an earlier run sent it", PastDeadline: !u.fitsDeadline(ctx, left)}
		u.announce(ctx, w)
		if w.PastDeadline {
			t.waiting(w)
			continue
		}
		if err := u.sleep(ctx, left); err != nil {
			return nil // the run ended meanwhile: the batch stays open
		}
		if err := u.settleAdopted(ctx, flightID, b, members, t); err != nil {
			return err
		}
	}
	return nil
}
