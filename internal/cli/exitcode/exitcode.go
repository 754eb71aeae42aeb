// Package exitcode is the one place that maps an error to tilectl's process
// exit code. Scripts and operators depend on these numbers: they never
// change meaning.
package exitcode

import (
	"errors"

	"github.com/tilectl/tilectl/uploader"
)

// Exit codes.
const (
	OK          = 0 // success
	Failure     = 1 // any other failure
	Usage       = 2 // bad command line or configuration
	Partial     = 3 // the run finished but tiles are still pending (other runs' open batches included) or were given up
	NotOnGround = 4 // the flight is not on_ground (uploader.ErrFlightNotOnGround)
	// 5 is reserved and never returned: runs share a flight by batch
	// claims with leases, so another run uploading it is not an error
	// (tiles it holds at the end make Partial). Scripts may test
	// for 5, so it is given no other meaning.
)

// ExitError carries an explicit exit code. Err is what is printed; a nil Err
// prints nothing (the command already said everything).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// New wraps err with an exit code.
func New(code int, err error) *ExitError { return &ExitError{Code: code, Err: err} }

// UsageError marks err as a command-line or configuration mistake (exit 2).
func UsageError(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: Usage, Err: err}
}

// Code is the exit code for err: nil is OK, an ExitError says its own code,
// known sentinels map to their codes, anything else is Failure.
func Code(err error) int {
	if err == nil {
		return OK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var se *SignalError
	if errors.As(err, &se) {
		return se.Code()
	}
	switch {
	case errors.Is(err, uploader.ErrFlightNotOnGround):
		return NotOnGround
	case errors.Is(err, uploader.ErrNoSequencing):
		return Usage // a client ID configured for a provider without sequencing
	}
	return Failure
}
