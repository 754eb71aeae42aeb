package uploader

import (
	"context"
	"net/http/httptrace"
	"testing"
)

// wrote fires the request-written trace of the attempt whose context is
// ctx, as net/http's write loop does once it has written the request.
func wrote(ctx context.Context) {
	httptrace.ContextClientTrace(ctx).WroteRequest(httptrace.WroteRequestInfo{})
}

// net/http reports a write from its own goroutine, which may run after the
// attempt's answer came back and the next attempt began: the write still
// belongs to its own attempt, and no write is a replay unless one attempt
// went on the wire twice.
func TestALateWriteReportIsCountedToItsOwnAttemptNotAsAReplay(t *testing.T) {
	ex := &exchange{}
	first := ex.attemptCtx(context.Background())
	second := ex.attemptCtx(context.Background()) // the resend began ...
	wrote(first)                                  // ... before the first write was reported
	wrote(second)
	if got := ex.replays(); got != 0 {
		t.Fatalf("replays = %d after one write per attempt, want 0", got)
	}
	wrote(second) // the second attempt on the wire again
	if got := ex.replays(); got != 1 {
		t.Fatalf("replays = %d after an attempt was written twice, want 1", got)
	}
}
