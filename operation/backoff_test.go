package operation

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffWithoutJitterDoublesUpToTheCap(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: time.Second, Cap: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.Delay(i+1, nil, 0); got != w {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w)
		}
	}
	for _, n := range []int{63, 64, 1000, 1 << 40} {
		if got := b.Delay(n, nil, 0); got != 10*time.Second {
			t.Errorf("Delay(%d) = %v, want the cap", n, got)
		}
	}
	if got := (Backoff{Base: time.Second}).Delay(1<<40, nil, 0); got != MaxHintDelay {
		t.Errorf("uncapped huge n = %v, want MaxHintDelay", got)
	}
	if got := b.Delay(0, nil, 0); got != time.Second {
		t.Errorf("Delay(0) = %v, want base", got)
	}
}

func TestBackoffJitterStaysInItsRange(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	base, capD := 100*time.Millisecond, 5*time.Second
	tests := []struct {
		kind   JitterKind
		lo, hi func(n int, prev time.Duration) time.Duration
	}{
		{JitterFull, func(int, time.Duration) time.Duration { return 0 },
			func(n int, _ time.Duration) time.Duration { return expDelay(base, n, capD) }},
		{JitterEqual, func(n int, _ time.Duration) time.Duration { return expDelay(base, n, capD) / 2 },
			func(n int, _ time.Duration) time.Duration { return expDelay(base, n, capD) }},
		{JitterDecorrelated, func(int, time.Duration) time.Duration { return base },
			func(_ int, prev time.Duration) time.Duration { return min(capD, max(base, 3*prev)) }},
	}
	for _, tt := range tests {
		b := Backoff{Base: base, Cap: capD, Jitter: tt.kind}
		var prev time.Duration
		distinct := map[time.Duration]bool{}
		for n := 1; n <= 200; n++ {
			d := b.Delay(n, rng, prev)
			if lo, hi := tt.lo(n, prev), tt.hi(n, prev); d < lo || d > hi {
				t.Fatalf("jitter %s: Delay(%d, prev %v) = %v, want in [%v, %v]", tt.kind, n, prev, d, lo, hi)
			}
			distinct[d] = true
			prev = d
		}
		if len(distinct) < 50 {
			t.Errorf("jitter %s gave only %d distinct delays in 200", tt.kind, len(distinct))
		}
	}
}

func TestBackoffIsDeterministicForASeed(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: time.Second, Cap: time.Minute, Jitter: JitterFull}
	r1, r2 := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for n := 1; n < 20; n++ {
		if a, c := b.Delay(n, r1, 0), b.Delay(n, r2, 0); a != c {
			t.Fatalf("n=%d: %v != %v", n, a, c)
		}
	}
}

func BenchmarkBackoffDelay(b *testing.B) {
	bo := Backoff{Base: 100 * time.Millisecond, Cap: 30 * time.Second, Jitter: JitterFull}
	rng := rand.New(rand.NewPCG(1, 1))
	n := 0
	for b.Loop() {
		n++
		bo.Delay(n%40+1, rng, 0)
	}
}
