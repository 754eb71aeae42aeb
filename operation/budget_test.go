package operation

import (
	"sync"
	"testing"
)

func TestRetryBudgetThrottlesBelowHalfAndRecovers(t *testing.T) {
	t.Parallel()
	b, err := NewRetryBudget(10, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	// 10 -> 9 .. 6 allowed (> 5); the 5th failure reaches 5: throttled.
	for i := 1; i <= 4; i++ {
		if !b.OnFailure() {
			t.Fatalf("failure %d: throttled too early at %v tokens", i, b.Tokens())
		}
	}
	if b.OnFailure() || b.Allow() {
		t.Fatalf("at %v tokens retries should be throttled", b.Tokens())
	}
	for i := 0; i < 20; i++ {
		b.OnFailure()
	}
	if b.Tokens() != 0 {
		t.Fatalf("tokens = %v, want floor 0", b.Tokens())
	}
	for i := 0; i < 11; i++ { // 0 -> 5.5
		b.OnSuccess()
	}
	if !b.Allow() {
		t.Fatalf("at %v tokens retries should be allowed again", b.Tokens())
	}
	for i := 0; i < 100; i++ {
		b.OnSuccess()
	}
	if b.Tokens() != 10 {
		t.Fatalf("tokens = %v, want cap 10", b.Tokens())
	}
}

func TestNewRetryBudgetRejectsBadSettings(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]float64{{0, 0.1}, {-1, 0.1}, {1001, 1}, {10, 0}, {10, 11}} {
		if _, err := NewRetryBudget(c[0], c[1]); err == nil {
			t.Errorf("NewRetryBudget(%v, %v) accepted", c[0], c[1])
		}
	}
}

func TestRetryBudgetIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	b, _ := NewRetryBudget(1000, 1)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				b.OnFailure()
			}
		}()
	}
	wg.Wait()
	if b.Tokens() != 600 {
		t.Fatalf("tokens = %v, want 600 after 400 failures", b.Tokens())
	}
}
