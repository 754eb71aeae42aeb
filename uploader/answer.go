package uploader

import (
	"errors"
	"fmt"

	"github.com/tilectl/tilectl/operation"
)

// failure turns an exchange that did not end in a complete 2xx answer into
// the run-level error: the caller's context error, or a *ProviderError.
func (a exchangeResult) failure(opID, doing string) error {
	if a.cancelled {
		return fmt.Errorf("%s: %w", doing, a.err)
	}
	if je := (*journalError)(nil); errors.As(a.err, &je) {
		return fmt.Errorf("%s: %w", doing, je)
	}
	if a.status == 0 {
		err := a.err
		if err == nil {
			err = errors.New("no answer")
		}
		return &ProviderError{OpID: opID, Err: fmt.Errorf("%s after %d attempt(s): %w", doing, a.attempts, err)}
	}
	pe := &ProviderError{Status: a.status, OpID: opID, Err: a.err}
	if eb, err := operation.ParseErrorBody(a.body); err == nil {
		// A provider may quote the token it was sent (a 401 saying which
		// token it refused): the run's error is printed.
		pe.Code, pe.Message = eb.Code(), eb.Message()
		if a.redact != nil {
			pe.Code, pe.Message = a.redact(pe.Code), a.redact(pe.Message)
		}
	}
	switch {
	case a.err != nil:
		// Resending stopped early (a wait beyond the deadline or cap).
		pe.Message = joinMsg(pe.Message, a.err.Error())
	case a.status >= 200 && a.status < 300:
		if a.bodyErr == nil {
			return nil
		}
		pe.Message = joinMsg(pe.Message, fmt.Sprintf("%s: answer unreadable after %d attempt(s): %v", doing, a.attempts, a.bodyErr))
	case a.status >= 300 && a.status < 400:
		pe.Message = joinMsg(pe.Message, fmt.Sprintf("%s: redirect to %q refused (the provider URL must answer directly)",
			doing, a.header.Get("Location")))
	default:
		if pe.Message == "" {
			pe.Message = doing
		}
		if a.attempts > 1 {
			pe.Message += fmt.Sprintf(" (after %d attempts)", a.attempts)
		}
	}
	return pe
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
