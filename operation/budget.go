package operation

import (
	"fmt"
	"sync"
)

// RetryBudget limits resends across every operation of a run with a token
// bucket, so retries tighten under congestion (gRPC A6's retry throttling
// in its additive form): the bucket starts with Initial tokens,
// each first attempt deposits Ratio, each resend takes one whole token, and
// a resend finding less than one is refused. Resends can thus never exceed
// Initial + Ratio x first attempts, however many operations fail at once.
// The bucket holds at most Max tokens, so a long quiet run does not save up
// a burst that a later outage would spend. Safe for concurrent use.
//
// The HTTP uploader takes one per run: a batch whose resend is refused is
// left open for the next run instead of resent.
type RetryBudget struct {
	mu sync.Mutex
	// Thousandths of a token, so that five deposits of 0.2 make exactly
	// one token (float sums would fall short).
	max, ratio, tokens int64
}

const milli = 1000

// NewRetryBudget returns a bucket holding initial tokens. initial must be
// in [0, max], ratio in [0, 1] and max in [1, 1e6].
func NewRetryBudget(initial, ratio, maxTokens float64) (*RetryBudget, error) {
	if !(maxTokens >= 1 && maxTokens <= 1e6) {
		return nil, fmt.Errorf("retry budget: max tokens %v, want 1..1000000", maxTokens)
	}
	if !(initial >= 0 && initial <= maxTokens) {
		return nil, fmt.Errorf("retry budget: initial tokens %v, want 0..%v", initial, maxTokens)
	}
	if !(ratio >= 0 && ratio <= 1) {
		return nil, fmt.Errorf("retry budget: ratio %v, want 0..1", ratio)
	}
	return &RetryBudget{max: int64(maxTokens * milli), ratio: int64(ratio*milli + 0.5), tokens: int64(initial * milli)}, nil
}

// OnFirstAttempt deposits Ratio for an operation's first attempt.
func (b *RetryBudget) OnFirstAttempt() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.tokens+b.ratio, b.max)
}

// TryResend takes a token for one resend and reports whether there was one.
func (b *RetryBudget) TryResend() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < milli {
		return false
	}
	b.tokens -= milli
	return true
}
