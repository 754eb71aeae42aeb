package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercentGivesASmallHeapTheFloorAndALargeOneGosDefault(t *testing.T) {
	const floor = 32 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, maxPercent},            // nothing measured yet: the most
		{1 << 20, maxPercent},      // 1 MiB live: 32x would be the floor, capped at the most
		{8 << 20, maxPercent},      // 8 MiB: 4x is exactly the floor
		{16 << 20, 200},            // 16 MiB: the floor is 2x
		{32 << 20, defaultPercent}, // the floor is the live heap: Go's default
		{1 << 30, defaultPercent},  // a large heap grows by Go's default, never less
	} {
		if got := percent(c.live, floor); got != c.want {
			t.Errorf("percent(%d MiB live) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}

// currentPercent reads the GC percent without changing it (setting it
// to read it would race with Keep's hook).
func currentPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestKeepFollowsTheLiveHeapAfterEachCollectionUntilStopped runs in the
// test's own process: no test of this package runs in parallel.
func TestKeepFollowsTheLiveHeapAfterEachCollectionUntilStopped(t *testing.T) {
	const before = 150 // not Go's default, to tell a restored percent from one Keep set
	orig := debug.SetGCPercent(before)
	defer debug.SetGCPercent(orig)
	// A floor of one byte: any live heap is larger, so once a collection
	// has been seen the percent is Go's default.
	stop := Keep(1, func(string) string { return "" })
	if got := currentPercent(); got != maxPercent {
		stop()
		t.Fatalf("GC percent %d before any collection, want %d (the live heap is not known yet)", got, maxPercent)
	}
	// The hook runs on the cleanup goroutine after a collection: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for currentPercent() != defaultPercent {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("GC percent %d after collections, want %d (the floor is below the live heap)", currentPercent(), defaultPercent)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	stop()
	if got := currentPercent(); got != before {
		t.Fatalf("GC percent %d after stop, want %d (as before Keep)", got, before)
	}
	// Stopped, the hook changes nothing more.
	for range 3 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if got := currentPercent(); got != before {
		t.Fatalf("GC percent %d after collections once stopped, want %d (left alone)", got, before)
	}
}

func TestKeepLeavesAnOperatorsGOGCAlone(t *testing.T) {
	before := currentPercent()
	stop := Keep(1<<40, func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	})
	defer stop()
	for range 3 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if got := currentPercent(); got != before {
		t.Fatalf("GC percent %d with GOGC set, want %d (untouched)", got, before)
	}
}
