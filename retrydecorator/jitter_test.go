package retrydecorator

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
)

func TestDecorrelatedJitterDrawsBetweenBaseAndThreeTimesThePreviousSleep(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Jitter, cfg.Rand = operation.JitterDecorrelated, rand.New(rand.NewPCG(7, 0))
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	prev := time.Duration(0)
	for n := 1; n <= 20; n++ {
		d := cfg.Backoff(n, prev)
		hi := min(max(cfg.BackoffBase, 3*prev), cfg.BackoffCap)
		if d < cfg.BackoffBase || d > hi {
			t.Fatalf("retry %d after %v slept %v, want within [%v, %v]", n, prev, d, cfg.BackoffBase, hi)
		}
		prev = d
	}
}
