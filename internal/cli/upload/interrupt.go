package upload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
)

// openBatchesTimeout bounds the count of the batches an interrupted run
// waits for: the acknowledgement must not wait long for it.
const openBatchesTimeout = time.Second

// interruptState is what an interrupted flight waits for: its batches on
// the wire, which are let finish and settle so that their answers are not
// lost. Its methods are safe for concurrent use.
type interruptState struct {
	onWire atomic.Int64 // -1 when they could not be counted
	again  string       // how to stop at once: "Ctrl-C again"
}

func newInterruptState(onWire int, se *exitcode.SignalError) *interruptState {
	s := &interruptState{again: "Ctrl-C again"}
	if se.Signal != syscall.SIGINT {
		s.again = "send " + se.Name() + " again"
	}
	s.onWire.Store(int64(onWire))
	return s
}

// text is the status line's state and the log's message.
func (s *interruptState) text() string {
	abort := s.again + " to stop now; they resume on the next run"
	switch n := s.onWire.Load(); {
	case n < 0:
		return fmt.Sprintf("interrupting: waiting for the batches on the wire (%s)", abort)
	case n == 0:
		return fmt.Sprintf("interrupting: recording what was sent and what is left (%s to stop now)", s.again)
	case n == 1:
		return fmt.Sprintf("interrupting: waiting for 1 batch on the wire (%s)", abort)
	default:
		return fmt.Sprintf("interrupting: waiting for %d batches on the wire (%s)", n, abort)
	}
}

// settled counts one batch answered and settled since the signal.
func (s *interruptState) settled() {
	for {
		n := s.onWire.Load()
		if n <= 0 || s.onWire.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// watchInterrupt acknowledges a signal the moment it cancels ctx while
// flight p uploads: the status line and a WARN log line say what the run
// waits for and how to stop at once. stop ends the watch.
func (r *run) watchInterrupt(ctx context.Context, p *progress, flightID string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		se := exitcode.Interruption(ctx)
		if se == nil {
			return // the deadline, not a signal
		}
		st := newInterruptState(r.ownOpenBatches(ctx, flightID), se)
		p.interrupting(st)
		r.log.Warn().Str("flight_id", flightID).Str("signal", se.Name()).
			Int64("batches_on_the_wire", st.onWire.Load()).Msg(st.text())
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// ownOpenBatches counts this run's open batches of the flight that may be
// on the wire: not those waiting for the provider's advised time, which no
// run sends before it. -1 when the count failed.
func (r *run) ownOpenBatches(ctx context.Context, flightID string) int {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), openBatchesTimeout)
	defer cancel()
	ls, err := r.store.Leases(cctx, flightID)
	if err != nil {
		return -1
	}
	n := 0
	for _, l := range ls {
		if l.RunID == r.store.Run().ID {
			n += l.Batches - l.WaitingBatches
		}
	}
	return n
}

// interruptedFlight marks a flight the signal reached as interrupted. The
// cancellation is not the flight's error (the run says it was interrupted);
// any other error is kept, in the flight's error and returned, even one the
// uploader joined to the cancellation (a pending count, a journal sync or a
// lease release that failed as the run ended).
func interruptedFlight(fs *FlightSummary, err error, se *exitcode.SignalError) error {
	fs.Outcome = "interrupted"
	fs.Error = nil
	err = withoutCancellation(err, se)
	if err != nil {
		msg := err.Error()
		fs.Error = &msg
	}
	return err
}

// withoutCancellation is err without its cancellation by ctx or by signal
// se: nil when that is all of it. Of errors joined together, those that are
// not the cancellation are kept as they are; a wrapper around such a join
// gives way to what it wraps, whose errors say what failed themselves.
func withoutCancellation(err error, se *exitcode.SignalError) error {
	if err == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, se) {
		return err
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		var kept []error
		for _, e := range u.Unwrap() {
			if k := withoutCancellation(e, se); k != nil {
				kept = append(kept, k)
			}
		}
		if len(kept) == 1 {
			return kept[0]
		}
		return errors.Join(kept...) // nil when none is kept
	case interface{ Unwrap() error }:
		return withoutCancellation(u.Unwrap(), se)
	}
	return nil // the cancellation itself
}
