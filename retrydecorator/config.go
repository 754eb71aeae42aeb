package retrydecorator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// Config bounds the decorator's retries. The zero value is not valid; the
// command builds it from config.Retry, where the defaults are.
type Config struct {
	// MaxInCallRetries is how many times one UploadPendingTiles call calls
	// the inner uploader again after a partial outcome. Zero means one
	// inner call and no retry.
	MaxInCallRetries int
	// MaxPerTileAttempts is how many counted rejections a tile may collect,
	// across calls and runs, before it moves to upload_giveup.
	MaxPerTileAttempts int
	// BackoffBase is the sleep before the first retry; retry n sleeps
	// min(BackoffBase*2^(n-1), BackoffCap).
	BackoffBase time.Duration
	// BackoffCap is the longest sleep, and the hint added to now for
	// NextRetryAt when the in-call budget runs out.
	BackoffCap time.Duration
	// Jitter randomises each sleep; "" means operation.JitterNone.
	Jitter operation.JitterKind
	// Rand is the jitter's random source; nil means the global source;
	// tests pass a seeded one.
	Rand *rand.Rand
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid retry config")

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.MaxInCallRetries < 0:
		return fmt.Errorf("%w: max_in_call_retries must be >= 0, got %d", ErrInvalidConfig, c.MaxInCallRetries)
	case c.MaxPerTileAttempts < 1:
		return fmt.Errorf("%w: max_per_tile_attempts must be >= 1, got %d", ErrInvalidConfig, c.MaxPerTileAttempts)
	case c.BackoffBase <= 0:
		return fmt.Errorf("%w: backoff_base must be positive, got %s", ErrInvalidConfig, c.BackoffBase)
	case c.BackoffCap < c.BackoffBase:
		return fmt.Errorf("%w: backoff_cap (%s) must be >= backoff_base (%s)", ErrInvalidConfig, c.BackoffCap, c.BackoffBase)
	}
	if !c.Jitter.Valid() {
		return fmt.Errorf("%w: jitter must be none, full, equal or decorrelated, got %q", ErrInvalidConfig, c.Jitter)
	}
	return nil
}

// Backoff is the sleep before retry n (1-based): min(base*2^(n-1), cap),
// then jittered; prev, the previous sleep, is used by JitterDecorrelated
// only. It is operation.Backoff's, which never overflows.
func (c Config) Backoff(n int, prev time.Duration) time.Duration {
	return c.backoff().Delay(n, c.Rand, prev)
}

func (c Config) backoff() operation.Backoff {
	return operation.Backoff{Base: c.BackoffBase, Cap: c.BackoffCap, Jitter: c.Jitter}
}
