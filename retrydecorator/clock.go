package retrydecorator

import (
	"context"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// SystemClock is the real Clock.
type SystemClock struct{}

var _ Clock = SystemClock{}

// Now is time.Now.
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep is operation.Sleep.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error { return operation.Sleep(ctx, d) }
