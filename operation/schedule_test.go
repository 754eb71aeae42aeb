package operation

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestScheduleValidate(t *testing.T) {
	t.Parallel()
	bo := Backoff{Base: time.Second, Cap: 8 * time.Second}
	tests := []struct {
		name      string
		s         Schedule
		wantWorst time.Duration
		wantErr   error
	}{
		// 4 x 10s + (1+2+4) = 47s
		{"fits", Schedule{MaxAttempts: 4, AttemptTimeout: 10 * time.Second, Deadline: time.Minute, Margin: 5 * time.Second, Backoff: bo}, 47 * time.Second, nil},
		{"exactly fits", Schedule{MaxAttempts: 4, AttemptTimeout: 10 * time.Second, Deadline: 52 * time.Second, Margin: 5 * time.Second, Backoff: bo}, 47 * time.Second, nil},
		{"one attempt has no backoff", Schedule{MaxAttempts: 1, AttemptTimeout: time.Second, Deadline: time.Second}, time.Second, nil},
		// 6 x 10s + (1+2+4+8+8) = 83s
		{"too long", Schedule{MaxAttempts: 6, AttemptTimeout: 10 * time.Second, Deadline: time.Minute, Margin: 5 * time.Second, Backoff: bo}, 83 * time.Second, ErrScheduleExceedsDeadline},
		// full jitter's worst case is the unjittered delay
		{"jitter worst case", Schedule{MaxAttempts: 3, AttemptTimeout: time.Second, Deadline: 5 * time.Second, Backoff: Backoff{Base: time.Second, Jitter: JitterFull}}, 6 * time.Second, ErrScheduleExceedsDeadline},
		// decorrelated: 1, 3, 9 capped at 5
		{"decorrelated worst case", Schedule{MaxAttempts: 4, AttemptTimeout: time.Second, Deadline: time.Minute, Backoff: Backoff{Base: time.Second, Cap: 5 * time.Second, Jitter: JitterDecorrelated}}, 13 * time.Second, nil},
		{"huge attempts saturate", Schedule{MaxAttempts: 1 << 40, AttemptTimeout: time.Hour, Deadline: time.Hour, Backoff: bo}, MaxHintDelay, ErrScheduleExceedsDeadline},
		{"no attempts", Schedule{AttemptTimeout: time.Second, Deadline: time.Second}, 0, ErrInvalidSchedule},
		{"no timeout", Schedule{MaxAttempts: 1, Deadline: time.Second}, 0, ErrInvalidSchedule},
		{"margin eats deadline", Schedule{MaxAttempts: 1, AttemptTimeout: time.Second, Deadline: time.Second, Margin: time.Second}, 0, ErrInvalidSchedule},
	}
	for _, tt := range tests {
		worst, err := tt.s.Validate()
		if worst != tt.wantWorst || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("%s: Validate() = %v, %v; want %v, %v", tt.name, worst, err, tt.wantWorst, tt.wantErr)
		}
	}
}

func TestScheduleErrorStatesTheBoundAndTheDeadline(t *testing.T) {
	t.Parallel()
	_, err := Schedule{MaxAttempts: 6, AttemptTimeout: 10 * time.Second, Deadline: time.Minute, Margin: 5 * time.Second,
		Backoff: Backoff{Base: time.Second, Cap: 8 * time.Second}}.Validate()
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"1m23s", "1m0s", "5s", "55s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}
