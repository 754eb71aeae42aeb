package operation

import (
	"fmt"
	"sync"
)

// RetryBudget throttles retries across many calls, in the manner of gRPC's
// retry throttling: a bucket of MaxTokens starts full; each failure takes
// one token and each success gives back TokenRatio; retries are allowed only
// while more than half the bucket is left. A failing dependency thus sees
// retries fade out instead of multiplied load. Safe for concurrent use.
type RetryBudget struct {
	mu     sync.Mutex
	max    float64
	ratio  float64
	tokens float64
}

// NewRetryBudget returns a full bucket. maxTokens must be in (0, 1000] and
// tokenRatio in (0, maxTokens], as gRPC requires of its service config.
func NewRetryBudget(maxTokens, tokenRatio float64) (*RetryBudget, error) {
	if !(maxTokens > 0 && maxTokens <= 1000) {
		return nil, fmt.Errorf("retry budget: max tokens %v, want (0, 1000]", maxTokens)
	}
	if !(tokenRatio > 0 && tokenRatio <= maxTokens) {
		return nil, fmt.Errorf("retry budget: token ratio %v, want (0, %v]", tokenRatio, maxTokens)
	}
	return &RetryBudget{max: maxTokens, ratio: tokenRatio, tokens: maxTokens}, nil
}

// OnFailure records a failed attempt and reports whether a retry is still
// allowed after it.
func (b *RetryBudget) OnFailure() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = max(b.tokens-1, 0)
	return b.tokens > b.max/2
}

// OnSuccess records a successful attempt.
func (b *RetryBudget) OnSuccess() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.tokens+b.ratio, b.max)
}

// Allow reports whether a retry may be made now, without recording anything.
func (b *RetryBudget) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens > b.max/2
}

// Tokens is the current token count, for metrics.
func (b *RetryBudget) Tokens() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens
}
