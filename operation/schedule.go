package operation

import (
	"errors"
	"fmt"
	"time"
)

// Schedule is a whole retry policy, checked once at configuration time so
// that a policy that cannot finish before its deadline is refused up front
// rather than discovered mid-flight.
type Schedule struct {
	MaxAttempts    int           // attempts in all, the first included; >= 1
	AttemptTimeout time.Duration // per attempt; > 0
	Deadline       time.Duration // for all attempts and waits together; > 0
	Margin         time.Duration // kept free before the deadline; >= 0
	Backoff        Backoff
}

// ErrScheduleExceedsDeadline is wrapped by the error of a schedule whose
// worst case does not fit its deadline.
var ErrScheduleExceedsDeadline = errors.New("retry schedule exceeds its deadline")

// ErrInvalidSchedule is wrapped by the error of a malformed schedule.
var ErrInvalidSchedule = errors.New("invalid retry schedule")

// Validate computes the worst-case time the schedule can take — every
// backoff at its largest plus every attempt running to its timeout — and
// refuses the schedule when that exceeds Deadline - Margin (the budget rule
// sum(backoff) + attempts*timeout <= deadline - margin).
func (s Schedule) Validate() (worstCase time.Duration, err error) {
	switch {
	case s.MaxAttempts < 1:
		return 0, fmt.Errorf("%w: max attempts %d, want at least 1", ErrInvalidSchedule, s.MaxAttempts)
	case s.AttemptTimeout <= 0:
		return 0, fmt.Errorf("%w: attempt timeout %v, want > 0", ErrInvalidSchedule, s.AttemptTimeout)
	case s.Deadline <= 0:
		return 0, fmt.Errorf("%w: deadline %v, want > 0", ErrInvalidSchedule, s.Deadline)
	case s.Margin < 0 || s.Margin >= s.Deadline:
		return 0, fmt.Errorf("%w: margin %v, want 0 <= margin < deadline %v", ErrInvalidSchedule, s.Margin, s.Deadline)
	case s.Backoff.Base < 0 || s.Backoff.Cap < 0:
		return 0, fmt.Errorf("%w: negative backoff base or cap", ErrInvalidSchedule)
	}
	worst := satMul(s.AttemptTimeout, s.MaxAttempts)
	var prev time.Duration
	for n := 1; n < s.MaxAttempts && worst < MaxHintDelay; n++ {
		prev = s.Backoff.Max(n, prev)
		worst = satAdd(worst, prev)
	}
	if budget := s.Deadline - s.Margin; worst > budget {
		return worst, fmt.Errorf("%w: worst case %v (%d attempts x %v + backoffs) > deadline %v - margin %v = %v",
			ErrScheduleExceedsDeadline, worst, s.MaxAttempts, s.AttemptTimeout, s.Deadline, s.Margin, budget)
	}
	return worst, nil
}

func satAdd(a, b time.Duration) time.Duration {
	if a > MaxHintDelay-b {
		return MaxHintDelay
	}
	return a + b
}

func satMul(d time.Duration, n int) time.Duration {
	if n > 0 && d > MaxHintDelay/time.Duration(n) {
		return MaxHintDelay
	}
	return d * time.Duration(n)
}
