package uploader

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// endedBlocked ends a call blocked only when every tile still pending is
// accounted for by work that waits, each tile once: a tile nobody claimed
// is work the deadline cut, and a tile this run left for its bad blob may
// since sit in another run's held batch (Held is a look at them), so the
// two are not added up.
func TestEndedBlockedCountsEachPendingTileOnce(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	<-ctx.Done()
	until := time.Now().Add(time.Minute)
	waiting := func(tiles int) []Wait {
		return []Wait{{Reason: WaitProviderAdvice, OpID: "op-w", Tiles: tiles, Until: until, PastDeadline: true}}
	}
	held := func(tiles int) *Held {
		return &Held{Tiles: tiles, Holders: []Holder{{RunID: "other", Tiles: tiles, LeaseEnds: until}}, Until: until}
	}
	for _, tc := range []struct {
		name string
		out  Report
		want bool
	}{
		{"every pending tile in a waiting batch", Report{Pending: 2, Waiting: waiting(2)}, true},
		{"a tile nobody claimed beside a waiting batch", Report{Pending: 3, Waiting: waiting(2)}, false},
		{"waiting batches and local failures cover the pending tiles", Report{Pending: 3, Waiting: waiting(2), LocalFailed: 1}, true},
		{"every pending tile held by other runs", Report{Pending: 2, Held: held(2)}, true},
		{"a tile nobody claimed beside held work", Report{Pending: 3, Held: held(2)}, false},
		{"waiting and held batches cover the pending tiles", Report{Pending: 3, Waiting: waiting(1), Held: held(2)}, true},
		{"local failures that may be held work are not counted twice", Report{Pending: 3, Held: held(2), LocalFailed: 2}, false},
		{"local failures more than the held tiles cover the pending tiles", Report{Pending: 3, Waiting: waiting(1), Held: held(1), LocalFailed: 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := endedBlocked(ctx, fmt.Errorf("claim: %w", context.DeadlineExceeded), tc.out); got != tc.want {
				t.Errorf("endedBlocked(%+v) = %v, want %v", tc.out, got, tc.want)
			}
		})
	}
}

// A call cancelled, or ended by another error, does not end blocked,
// however its work waits.
func TestEndedBlockedOnlyForTheDeadline(t *testing.T) {
	out := Report{Pending: 1, Waiting: []Wait{{OpID: "op", Tiles: 1, Until: time.Now().Add(time.Minute)}}}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if endedBlocked(cctx, context.Canceled, out) {
		t.Error("a cancelled call ended blocked")
	}
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	if endedBlocked(dctx, fmt.Errorf("settle: connection refused"), out) {
		t.Error("a call ended by another error ended blocked")
	}
}
