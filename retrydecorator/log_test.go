package retrydecorator

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/uploader"
)

func zerologNop() zerolog.Logger { return zerolog.Nop() }

func TestLogsRetryConfigAtStartAndEachRetryWithAttemptSleepAndPending(t *testing.T) {
	st := newMemStore(flight, "a", "b", "c")
	inner := scriptedInner(st, func(call int, id string) bool { return id == "a" || (call == 0 && id == "b") })
	cfg := defaultConfig()
	cfg.MaxInCallRetries, cfg.MaxPerTileAttempts = 2, 100
	r := newRig(t, st, inner, cfg, Hooks{})
	if _, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight}); err != nil {
		t.Fatal(err)
	}
	lines := r.logs.lines(t)
	first := lines[0]
	if first["level"] != "info" || first["flight_id"] != flight || first["max_in_call_retries"] != 2.0 ||
		first["max_per_tile_attempts"] != 100.0 || first["backoff_base_s"] != 2.0 || first["backoff_cap_s"] != 60.0 ||
		first["jitter"] != "none" {
		t.Errorf("first log line %v, want INFO with the retry config", first)
	}
	retries := r.logs.withMessage(t, "info", "retrying")
	if len(retries) != 2 {
		t.Fatalf("retry log lines %d, want 2: %s", len(retries), r.logs.String())
	}
	want := []struct{ attempt, sleep, pending float64 }{{1, 2, 2}, {2, 4, 1}}
	for i, w := range want {
		l := retries[i]
		if l["attempt"] != w.attempt || l["sleep_s"] != w.sleep || l["remaining_pending_count"] != w.pending {
			t.Errorf("retry line %d = %v, want attempt %v sleep_s %v remaining_pending_count %v", i, l, w.attempt, w.sleep, w.pending)
		}
	}
}
