package upload

import (
	"context"
	"errors"
	"fmt"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
)

// reportEarlyFailure prints, for -o json, the one object of a run that
// ended before it had a summary (no token, no database, the flight data
// recorder locked past the deadline): its outcome, exit code and error.
// Nothing was counted, so what is left is null, not 0. It returns err with
// the exit code the object states.
func (r *run) reportEarlyFailure(ctx context.Context, err error) error {
	code := exitcode.Code(err)
	sum := Summary{Outcome: "failure", DryRun: r.opts.DryRun, RetryDecorator: r.decorate,
		Flights: []FlightSummary{}, LocalFailures: []LocalFailure{}}
	if se := exitcode.Interruption(ctx); se != nil {
		// The signal ended the start-up, whatever error it surfaced as.
		sum.Outcome, code = "interrupted", se.Code()
		if !errors.Is(err, se) {
			err = exitcode.New(code, fmt.Errorf("%w: %w", se, err))
		}
	}
	sum.ExitCode = code
	msg := err.Error()
	sum.Error = &msg
	r.reported = true
	if perr := sum.writeJSON(r.opts.IO.Out); perr != nil {
		return errors.Join(err, fmt.Errorf("print the summary: %w", perr))
	}
	return err
}
