package operation

import (
	"sync"
	"testing"
)

func TestRetryBudgetAllowsInitialPlusRatioOfFirstAttempts(t *testing.T) {
	t.Parallel()
	b, err := NewRetryBudget(10, 0.2, 100)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 { // 10 + 50 x 0.2 = 20 resends
		b.OnFirstAttempt()
	}
	n := 0
	for b.TryResend() {
		n++
		if n > 1000 {
			t.Fatal("budget never ran out")
		}
	}
	if n != 20 {
		t.Fatalf("resends allowed = %d, want 20", n)
	}
	for range 5 { // one whole token again
		b.OnFirstAttempt()
	}
	if !b.TryResend() || b.TryResend() {
		t.Fatalf("after 5 first attempts at ratio 0.2 exactly one resend should be allowed (tokens %v)", tokensOf(b))
	}
}

func TestRetryBudgetHoldsAtMostMax(t *testing.T) {
	t.Parallel()
	b, _ := NewRetryBudget(2, 1, 5)
	for range 100 {
		b.OnFirstAttempt()
	}
	if tokensOf(b) != 5 {
		t.Fatalf("tokens = %v, want the cap 5", tokensOf(b))
	}
}

func TestNewRetryBudgetRejectsBadSettings(t *testing.T) {
	t.Parallel()
	for _, c := range [][3]float64{{-1, 0.1, 10}, {11, 0.1, 10}, {1, -0.1, 10}, {1, 1.5, 10}, {0, 0.1, 0.5}, {0, 0.1, 2e6}} {
		if _, err := NewRetryBudget(c[0], c[1], c[2]); err == nil {
			t.Errorf("NewRetryBudget(%v, %v, %v) accepted", c[0], c[1], c[2])
		}
	}
}

func TestRetryBudgetIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	b, _ := NewRetryBudget(100, 0, 100)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if b.TryResend() {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 100 {
		t.Fatalf("allowed %d resends from 100 tokens", allowed)
	}
}

func tokensOf(b *RetryBudget) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return float64(b.tokens) / milli
}
