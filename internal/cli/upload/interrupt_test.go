package upload

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
)

// A flight the signal reached is interrupted; of its error, only the
// cancellation is dropped: a failure beside it, such as the end-of-run
// pending count the uploader joins to the cancellation, is the flight's
// error still.
func TestAnInterruptedFlightKeepsEveryErrorButTheCancellation(t *testing.T) {
	se := &exitcode.SignalError{Signal: syscall.SIGINT}
	injected := errors.New("injected count failure")
	countErr := fmt.Errorf("count pending tiles of flight F1: %w", injected)
	syncErr := errors.New("make the upload journal durable: disk gone")
	for _, tc := range []struct {
		name string
		err  error
		want []error // kept; none: the flight has no error
	}{
		{"no error", nil, nil},
		{"the cancellation alone", context.Canceled, nil},
		{"the cancellation, wrapped", fmt.Errorf("4 tiles of flight F1 still pending as the run ended: %w", context.Canceled), nil},
		{"the signal as the cause", fmt.Errorf("upload batch: %w", se), nil},
		{"a failure of its own", countErr, []error{countErr}},
		{"the cancellation joined with the pending count's failure", errors.Join(context.Canceled, countErr), []error{countErr}},
		{"joins within joins", errors.Join(errors.Join(context.Canceled, countErr), fmt.Errorf("count: %w", se), syncErr),
			[]error{countErr, syncErr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := FlightSummary{FlightID: "F1", Outcome: "failure"}
			if tc.err != nil { // as flightSummary has it
				msg := tc.err.Error()
				fs.Error = &msg
			}
			got := interruptedFlight(&fs, tc.err, se)
			if fs.Outcome != "interrupted" {
				t.Errorf("outcome %q, want interrupted", fs.Outcome)
			}
			if len(tc.want) == 0 {
				if got != nil || fs.Error != nil {
					t.Errorf("kept %v (flight error %v), want nothing: the run says it was interrupted", got, fs.Error)
				}
				return
			}
			if got == nil {
				t.Fatalf("kept nothing of %q, want %v", tc.err, tc.want)
			}
			for _, w := range tc.want {
				if !errors.Is(got, w) {
					t.Errorf("kept %q, want it to hold %q", got, w)
				}
			}
			if errors.Is(got, context.Canceled) || errors.Is(got, se) {
				t.Errorf("kept %q, want no cancellation in it", got)
			}
			if fs.Error == nil || *fs.Error != got.Error() {
				t.Errorf("flight error %v, want what is kept: %q", fs.Error, got)
			}
		})
	}
}
