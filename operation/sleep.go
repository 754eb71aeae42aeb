package operation

import (
	"context"
	"time"
)

// Sleep waits d, or returns ctx.Err() as soon as ctx is done; a d of zero
// or less returns ctx.Err() at once. It is the real wait behind the
// client's injected sleeps.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
