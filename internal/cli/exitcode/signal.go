package exitcode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes for a run ended by a signal, the shell's 128+N.
const (
	Interrupted = 130 // SIGINT (Ctrl-C)
	Terminated  = 143 // SIGTERM (systemd stop, kill)
)

// SignalError is the cause of a context cancelled by SIGINT or SIGTERM.
// Code maps it to 128+N.
type SignalError struct{ Signal syscall.Signal }

func (e *SignalError) Error() string { return fmt.Sprintf("interrupted by %s", signalName(e.Signal)) }

// Name is the signal's name: "SIGINT", "SIGTERM".
func (e *SignalError) Name() string { return signalName(e.Signal) }

// Code is the exit code for the signal.
func (e *SignalError) Code() int { return 128 + int(e.Signal) }

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// Interruption returns the signal that cancelled ctx, or nil.
func Interruption(ctx context.Context) *SignalError {
	var se *SignalError
	if errors.As(context.Cause(ctx), &se) {
		return se
	}
	return nil
}

// NotifyContext returns a context cancelled, with a *SignalError as its
// cause, by the first SIGINT or SIGTERM, so that commands settle what is in
// flight and exit 130 or 143. A second signal exits at once with its code:
// the operator insisted. stop releases the signal handler.
func NotifyContext(parent context.Context, onSecond func(code int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		first := true
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				sig, _ := s.(syscall.Signal)
				se := &SignalError{Signal: sig}
				if !first {
					onSecond(se.Code())
					return
				}
				first = false
				cancel(se)
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}
