package operation

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// AttemptClass says what one client attempt at an operation established.
type AttemptClass uint8

const (
	// AttemptSealedSuccess: the server answered the operation's outcome, a
	// success. Terminal.
	AttemptSealedSuccess AttemptClass = iota + 1
	// AttemptSealedFailure: the server answered the operation's outcome, an
	// application failure. Terminal: a retry would replay it
	// (retry.seal.terminal-replay).
	AttemptSealedFailure
	// AttemptTransportBeforeSend: the request provably never left (dial
	// refused, encoding failed). Safe to send again.
	AttemptTransportBeforeSend
	// AttemptTransportAfterSend: the connection broke after the request
	// may have arrived. The outcome is unknown; only the same ID may be
	// tried again.
	AttemptTransportAfterSend
	// AttemptNotExecuted: the server answered without running the
	// operation (rate limited, unavailable, still processing). Retried
	// when the result says Retryable.
	AttemptNotExecuted
	// AttemptIndeterminate: the server answered Indeterminate. Retried
	// (same ID; the server decides) only when the result says Retryable.
	AttemptIndeterminate
	// AttemptCancelled: the caller's context ended. Terminal.
	AttemptCancelled
)

var classNames = [...]string{"", "sealed success", "sealed failure", "transport failure before send",
	"transport failure after send", "not executed", "indeterminate", "cancelled"}

func (c AttemptClass) String() string {
	if int(c) < len(classNames) && c > 0 {
		return classNames[c]
	}
	return fmt.Sprintf("attempt class %d", uint8(c))
}

// AttemptResult is one attempt's result, classified by the caller's attempt
// function, with the retry advice it carries (e.g. from operation.Advise).
type AttemptResult struct {
	Class AttemptClass
	// Retryable: trying again may help (for AttemptNotExecuted and
	// AttemptIndeterminate; transport failures are always retryable).
	Retryable bool
	// Delay is the wait before the next attempt; 0 uses DoOptions.Delay.
	Delay time.Duration
	// MaxAttempts, when > 0, lowers DoOptions.MaxAttempts (a server hint).
	MaxAttempts int
	Value       any   // the caller's payload, e.g. a parsed response
	Err         error // what went wrong, for failures
}

// DoOptions bound Do. Zero fields take the stated defaults.
type DoOptions struct {
	// MaxAttempts in all, the first included. Default 5.
	MaxAttempts int
	// Delay is the wait when a result carries none. Default 1 s.
	Delay func(n int) time.Duration
	// Sleep waits d or until ctx ends. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnRetry is told about each retry before its wait. Optional.
	OnRetry func(n int, res AttemptResult, delay time.Duration)
}

// ErrAttemptsExhausted is wrapped by Do's error when retries ran out.
var ErrAttemptsExhausted = errors.New("attempts exhausted")

// ErrNotSealed is wrapped by Do's error when the last attempt ended
// without a sealed outcome and no retry was allowed.
var ErrNotSealed = errors.New("operation has no sealed outcome")

// Do drives one logical operation, opID, through as many attempts as its
// results and opts allow. Every attempt gets the same opID: Do never mints
// a new one, so the server's table keeps the operation single.
//
// It returns the last result. The error is nil only for
// AttemptSealedSuccess. A sealed failure's error wraps the result's Err;
// an Indeterminate answer that may not be retried wraps the result's Err or
// else an *IndeterminateError; other ends wrap ErrNotSealed, and
// ErrAttemptsExhausted when MaxAttempts ran out. Do never waits past ctx's
// deadline: when the next delay would cross it, it stops at once.
func Do(ctx context.Context, opID string, attempt func(ctx context.Context, opID string, n int) AttemptResult,
	opts DoOptions) (AttemptResult, error) {
	max := opts.MaxAttempts
	if max <= 0 {
		max = 5
	}
	sleep := opts.Sleep
	if sleep == nil {
		sleep = timerSleep
	}
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return AttemptResult{Class: AttemptCancelled, Err: err}, fmt.Errorf("operation %s: %w", opID, err)
		}
		res := attempt(ctx, opID, n)
		if res.Class == AttemptSealedSuccess {
			return res, nil
		}
		if res.MaxAttempts > 0 && res.MaxAttempts < max {
			max = res.MaxAttempts
		}
		if !shouldRetry(res) {
			return res, finalError(opID, n, res)
		}
		if n >= max {
			return res, fmt.Errorf("operation %s: %w after %d attempts: %w", opID, ErrAttemptsExhausted, n, finalError(opID, n, res))
		}
		d := res.Delay
		if d <= 0 && opts.Delay != nil {
			d = opts.Delay(n)
		} else if d <= 0 {
			d = time.Second
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return res, fmt.Errorf("operation %s: next attempt would pass the deadline: %w", opID, finalError(opID, n, res))
		}
		if opts.OnRetry != nil {
			opts.OnRetry(n, res, d)
		}
		if err := sleep(ctx, d); err != nil {
			return AttemptResult{Class: AttemptCancelled, Err: err}, fmt.Errorf("operation %s: %w", opID, err)
		}
	}
}

func shouldRetry(res AttemptResult) bool {
	switch res.Class {
	case AttemptTransportBeforeSend, AttemptTransportAfterSend:
		return true
	case AttemptNotExecuted, AttemptIndeterminate:
		return res.Retryable
	}
	return false // sealed outcomes and cancellation are final
}

func finalError(opID string, n int, res AttemptResult) error {
	switch res.Class {
	case AttemptSealedFailure:
		if res.Err != nil {
			return fmt.Errorf("operation %s failed: %w", opID, res.Err)
		}
		return fmt.Errorf("operation %s failed", opID)
	case AttemptIndeterminate:
		if res.Err != nil {
			return fmt.Errorf("operation %s: %w", opID, res.Err)
		}
		return fmt.Errorf("operation %s: %w", opID, &IndeterminateError{Key: Key{OpID: opID}, From: StateIndeterminate})
	}
	if res.Err != nil {
		return fmt.Errorf("operation %s: %s on attempt %d: %w: %w", opID, res.Class, n, ErrNotSealed, res.Err)
	}
	return fmt.Errorf("operation %s: %s on attempt %d: %w", opID, res.Class, n, ErrNotSealed)
}

func timerSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
