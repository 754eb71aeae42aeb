package operation_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// script returns an attempt function that answers results in order and
// records the IDs it was called with.
func script(ids *[]string, results ...operation.AttemptResult) func(context.Context, string, int) operation.AttemptResult {
	return func(_ context.Context, id string, n int) operation.AttemptResult {
		*ids = append(*ids, id)
		return results[n-1]
	}
}

type sleeps []time.Duration

func (s *sleeps) sleep(_ context.Context, d time.Duration) error { *s = append(*s, d); return nil }

// TestDoRetriesOnlyWithTheSameID: client.same-id, client.ambiguous-retry.
func TestDoRetriesOnlyWithTheSameID(t *testing.T) {
	var ids []string
	var slept sleeps
	res, err := operation.Do(context.Background(), "op-1", script(&ids,
		operation.AttemptResult{Class: operation.AttemptTransportBeforeSend},
		operation.AttemptResult{Class: operation.AttemptTransportAfterSend, Delay: 3 * time.Second},
		operation.AttemptResult{Class: operation.AttemptNotExecuted, Retryable: true, Delay: time.Second},
		operation.AttemptResult{Class: operation.AttemptSealedSuccess, Value: "ok"},
	), operation.DoOptions{Sleep: slept.sleep, Delay: func(int) time.Duration { return 7 * time.Millisecond }})
	if err != nil || res.Value != "ok" {
		t.Fatalf("Do: %v %v", res, err)
	}
	if len(ids) != 4 || ids[0] != "op-1" || ids[1] != "op-1" || ids[2] != "op-1" || ids[3] != "op-1" {
		t.Fatalf("attempt IDs %v, want op-1 every time", ids)
	}
	if want := (sleeps{7 * time.Millisecond, 3 * time.Second, time.Second}); len(slept) != 3 || slept[0] != want[0] || slept[1] != want[1] || slept[2] != want[2] {
		t.Fatalf("slept %v, want %v", slept, want)
	}
}

// TestDoStopsOnFinalResults: client.sealed-failure-final,
// client.indeterminate, client.not-retryable.
func TestDoStopsOnFinalResults(t *testing.T) {
	appErr := errors.New("checksum mismatch")
	cases := []struct {
		name  string
		res   operation.AttemptResult
		check func(error) bool
	}{
		{"sealed failure", operation.AttemptResult{Class: operation.AttemptSealedFailure, Err: appErr, Retryable: true},
			func(err error) bool { return errors.Is(err, appErr) }},
		{"indeterminate", operation.AttemptResult{Class: operation.AttemptIndeterminate},
			func(err error) bool { return operation.IsIndeterminate(err) }},
		{"not retryable", operation.AttemptResult{Class: operation.AttemptNotExecuted},
			func(err error) bool { return errors.Is(err, operation.ErrNotSealed) }},
	}
	for _, c := range cases {
		var ids []string
		var slept sleeps
		_, err := operation.Do(context.Background(), "op-2", script(&ids, c.res, c.res), operation.DoOptions{Sleep: slept.sleep})
		if len(ids) != 1 || len(slept) != 0 || !c.check(err) {
			t.Fatalf("%s: %d attempts, %d sleeps, err %v", c.name, len(ids), len(slept), err)
		}
	}
}

// TestDoBounds: client.max-attempts, client.deadline, client.cancel.
func TestDoBounds(t *testing.T) {
	amb := operation.AttemptResult{Class: operation.AttemptTransportAfterSend, Delay: time.Millisecond}
	var ids []string
	var slept sleeps
	_, err := operation.Do(context.Background(), "op-3", script(&ids, amb, amb, amb, amb), operation.DoOptions{MaxAttempts: 3, Sleep: slept.sleep})
	if len(ids) != 3 || !errors.Is(err, operation.ErrAttemptsExhausted) {
		t.Fatalf("max attempts: %d attempts, %v", len(ids), err)
	}

	ids = nil
	hinted := amb
	hinted.MaxAttempts = 2 // a server hint lowers the limit
	_, err = operation.Do(context.Background(), "op-3b", script(&ids, hinted, hinted, hinted), operation.DoOptions{MaxAttempts: 5, Sleep: slept.sleep})
	if len(ids) != 2 || !errors.Is(err, operation.ErrAttemptsExhausted) {
		t.Fatalf("hinted max attempts: %d attempts, %v", len(ids), err)
	}

	ids = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	long := operation.AttemptResult{Class: operation.AttemptTransportAfterSend, Delay: 2 * time.Hour}
	_, err = operation.Do(ctx, "op-4", script(&ids, long, long), operation.DoOptions{Sleep: slept.sleep})
	if len(ids) != 1 || err == nil {
		t.Fatalf("delay past deadline: %d attempts, %v", len(ids), err)
	}

	ids = nil
	cctx, ccancel := context.WithCancel(context.Background())
	res, err := operation.Do(cctx, "op-5", func(context.Context, string, int) operation.AttemptResult {
		ccancel()
		return amb
	}, operation.DoOptions{Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	if res.Class != operation.AttemptCancelled || !errors.Is(err, context.Canceled) || operation.IsIndeterminate(err) {
		t.Fatalf("cancelled: %v %v", res.Class, err)
	}
}
