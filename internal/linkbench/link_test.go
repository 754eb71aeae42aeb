package linkbench

import (
	"fmt"
	"testing"
	"time"
)

// profile is one ground link and the provider's batch limit on it.
type profile struct {
	name          string
	rate          int64 // bits per second each way
	rtt           time.Duration
	maxBatchTiles int
	tiles, size   int
}

// profiles are the links of the table.
var profiles = []profile{
	{"cellular", 30_000_000, 50 * time.Millisecond, 128, 2000, 16 << 10},
	{"satellite", 5_000_000, 700 * time.Millisecond, 16, 300, 16 << 10},
	{"longfat", 200_000_000, 150 * time.Millisecond, 4, 2000, 16 << 10},
}

// naiveConcurrencies are the naive client's runs; the best is the bar.
var naiveConcurrencies = []int{4, 16, 64}

// BenchmarkLink runs, per link profile, tilectl upload-pending at default
// settings and the naive client at each of naiveConcurrencies through the
// same emulated link, one after the other, and reports each as a share of
// the link's capacity (metrics tilectl-share, naive-best-share,
// naive-cN-share) and in MB/s of tile payload (tilectl-MB/s,
// naive-MB/s: the best), each naive run timed from its capabilities
// request as tilectl's from its start; naive-told-share is the best naive
// run timed from its first batch, as if it had been told the provider's
// limits; bound-share is the most a client that asks first can reach on
// the link (three round trips and the payload at the link's rate). With
// them: capacity-MB/s, the timeouts tilectl counted
// and, when upload-pending has --progress-interval, its worst ETA error
// from 25% done on (eta-error). The other sub-benchmarks are a link whose
// rate changes mid-run, a throttling provider (with a small burst and
// with a big one) and a --bwlimit run.
func BenchmarkLink(b *testing.B) {
	for _, p := range profiles {
		b.Run(p.name, func(b *testing.B) { benchProfile(b, p) })
	}
	b.Run("changing", benchChanging)
	b.Run("throttled", benchThrottled(5))
	b.Run("throttled-burst", benchThrottled(40))
	b.Run("bwlimit", benchBwlimit)
}

func benchProfile(b *testing.B, p profile) {
	r := newRig(b, "L"+p.name, p.tiles, p.size, p.maxBatchTiles)
	_, url := newLink(b, r.sink.URL, p.rate, p.rtt)
	capacity := float64(p.rate) / 8 // bytes per second
	share := func(d time.Duration) float64 { return float64(r.payload) / d.Seconds() / capacity }
	var extra []string
	eta := hasFlag(b, "--progress-interval")
	if eta {
		// As often as upload-pending looks at what is acknowledged: the
		// long fat run lasts a few seconds, and a line a second would give
		// its ETA one or two lines from a quarter done on.
		extra = append(extra, "--progress-interval", "250ms")
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r.reset(b)
		b.StartTimer()
		res := r.tilectl(b, url, 10*time.Minute, nil, extra...)
		b.StopTimer()
		if res.exit != 0 {
			b.Fatalf("tilectl exited %d:\n%s", res.exit, tail(res.stderr))
		}
		r.checkHeld(b, "tilectl")
		var best, told time.Duration
		for _, c := range naiveConcurrencies {
			r.reset(b)
			n := r.naive(b, url, c)
			b.ReportMetric(share(n.whole), fmt.Sprintf("naive-c%d-share", c))
			if best == 0 || n.whole < best {
				best = n.whole
			}
			if told == 0 || n.upload < told {
				told = n.upload
			}
		}
		b.ReportMetric(share(res.elapsed), "tilectl-share")
		b.ReportMetric(share(best), "naive-best-share")
		b.ReportMetric(float64(r.payload)/res.elapsed.Seconds()/1e6, "tilectl-MB/s")
		b.ReportMetric(float64(r.payload)/best.Seconds()/1e6, "naive-MB/s")
		b.ReportMetric(share(told), "naive-told-share")
		// The most any client that follows the contract can reach: a
		// handshake and the capabilities request, then the payload at the
		// link's rate, plus the first byte's way out and the last
		// answer's way back.
		b.ReportMetric(share(3*p.rtt+time.Duration(float64(r.payload)/capacity*float64(time.Second))), "bound-share")
		b.ReportMetric(capacity/1e6, "capacity-MB/s")
		b.ReportMetric(res.number("timeouts"), "timeouts")
		b.ReportMetric(res.number("concurrency"), "tilectl-concurrency")
		if e, ok := etaError(res.progress, res.end); eta && ok {
			b.ReportMetric(e, "eta-error")
		}
		b.Logf("%s: tilectl %v (%.2f of capacity), best naive %v (%.2f; %v, %.2f, from its first batch), tilectl/naive %.2f",
			p.name, res.elapsed.Round(time.Millisecond), share(res.elapsed), best.Round(time.Millisecond), share(best),
			told.Round(time.Millisecond), share(told), best.Seconds()/res.elapsed.Seconds())
		b.StartTimer()
	}
}
