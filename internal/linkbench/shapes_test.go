package linkbench

import (
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/linkemu"
	"github.com/tilectl/tilectl/provider/providertest"
)

// meter samples the bytes a link has carried up, for its rate over time.
type meter struct {
	mu      sync.Mutex
	samples []sample
	stop    chan struct{}
	done    chan struct{}
}

type sample struct {
	at    time.Time
	bytes int64
}

// startMeter samples l's up bytes every 50 ms until stopped.
func startMeter(l *linkemu.Link) *meter {
	m := &meter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			m.mu.Lock()
			m.samples = append(m.samples, sample{time.Now(), l.Stats().UpBytes})
			m.mu.Unlock()
			select {
			case <-t.C:
			case <-m.stop:
				return
			}
		}
	}()
	return m
}

func (m *meter) close() []sample {
	close(m.stop)
	<-m.done
	return m.samples
}

// recovery is how long after change the link's up rate, over a window of
// win that starts after change, first reaches at least want bits/s; ok is
// false if it never does before until.
func recovery(s []sample, change, until time.Time, win time.Duration, want float64) (time.Duration, bool) {
	for i, a := range s {
		if a.at.Before(change) {
			continue
		}
		for _, z := range s[i+1:] {
			if z.at.After(until) {
				return 0, false
			}
			if z.at.Sub(a.at) >= win {
				if float64(z.bytes-a.bytes)*8/z.at.Sub(a.at).Seconds() >= want {
					return z.at.Sub(change), true
				}
				break
			}
		}
	}
	return 0, false
}

// benchChanging runs tilectl at defaults on a 150 ms link whose rate goes
// 200 → 20 → 200 Mbit/s, with 16-tile batches (256 KiB: at 200 Mbit/s a
// client needs about 15 of them in flight to fill the link, at 20 Mbit/s
// 2), and reports how long after each change the link
// carries at least 0.85 of the new rate over half a second (recover-down-s,
// recover-up-s; a phase's full length when it never does), and the
// timeouts tilectl counted. tilectl is interrupted at the end of the last
// phase if it has not finished. On the same rig a naive client at
// concurrency 16 then uploads at a steady 200 Mbit/s: its share
// (naive-c16-steady-share) shows that the emulator itself can be filled.
func benchChanging(b *testing.B) {
	const (
		fast, slow = 200_000_000, 20_000_000
		rtt        = 150 * time.Millisecond
		first      = 4 * time.Second  // at fast
		second     = 8 * time.Second  // at slow
		third      = 15 * time.Second // at fast again, at most
		win        = 500 * time.Millisecond
	)
	const batch = 16
	r := newRig(b, "Lchanging", 12000, 16<<10, batch)
	l, url := newLink(b, r.sink.URL, fast, rtt)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r.reset(b)
		l.SetRate(fast)
		b.StartTimer()
		m := startMeter(l)
		stop := make(chan struct{})
		start := time.Now()
		down, up := start.Add(first), start.Add(first+second)
		end := up.Add(third)
		timers := []*time.Timer{
			time.AfterFunc(first, func() { l.SetRate(slow) }),
			time.AfterFunc(first+second, func() { l.SetRate(fast) }),
			time.AfterFunc(first+second+third, func() { close(stop) }),
		}
		res := r.tilectl(b, url, 2*time.Minute, stop)
		for _, t := range timers {
			t.Stop()
		}
		s := m.close()
		b.StopTimer()
		if res.exit != 0 && res.exit != 130 {
			b.Fatalf("tilectl exited %d:\n%s", res.exit, tail(res.stderr))
		}
		if res.end.Before(up.Add(win)) {
			b.Fatalf("tilectl finished %v after the rate went back up: too few tiles to see it recover", res.end.Sub(up))
		}
		rd, ok := recovery(s, down, up, win, 0.85*slow)
		if !ok {
			rd = second
		}
		ru, ok := recovery(s, up, end, win, 0.85*fast)
		if !ok {
			ru = min(third, res.end.Sub(up))
		}
		// The emulator's own ceiling, on the same rig: a naive client with
		// enough in flight on the link at a steady 200 Mbit/s.
		r.reset(b)
		l.SetRate(fast)
		r.sink.SetMaxBatchTiles(64)
		d := r.naive(b, url, 16).upload // 1 MiB batches: 16 in flight is 4x the link's BDP
		r.sink.SetMaxBatchTiles(batch)
		b.ReportMetric(float64(r.payload)/d.Seconds()/(fast/8), "naive-c16-steady-share")
		b.ReportMetric(rd.Seconds(), "recover-down-s")
		b.ReportMetric(ru.Seconds(), "recover-up-s")
		b.ReportMetric(res.number("timeouts"), "timeouts")
		b.Logf("changing link: %d tiles uploaded; back to 0.85 of 20 Mbit/s %v after the drop, of 200 Mbit/s %v after the rise (%v: never within the phase); %v timeouts",
			int(res.number("uploaded")), rd, ru, second.String()+" / "+min(third, res.end.Sub(up)).String(), res.number("timeouts"))
		b.StartTimer()
	}
}

// benchThrottled runs tilectl at defaults against a provider that allows
// 20 batches a second (16 tiles each) beyond a burst (burst batches at
// once from a rested bucket) through the long fat link, which could carry
// far more, and reports its tiles/s against the allowed 320
// (tilectl-tiles/s, allowed-tiles/s), against the most the bucket lets
// through (least-tiles/s: the tiles over the bucket's least time for them,
// the burst at once and the rest at its rate, plus the link's three round
// trips), and the share of its batch requests answered 429 (share-429).
// A big burst lets many batches start before the first refusal, which
// then refuses every one in flight.
func benchThrottled(burst int) func(*testing.B) {
	return func(b *testing.B) {
		const perSecond, batch, tiles = 20, 16, 2000
		const rtt = 150 * time.Millisecond
		r := newRig(b, fmt.Sprintf("Lthrottled%d", burst), tiles, 16<<10, batch)
		th := providertest.NewThrottle(r.sink, perSecond, float64(burst))
		hs := httptest.NewServer(th)
		b.Cleanup(hs.Close)
		_, url := newLink(b, hs.URL, 200_000_000, rtt)
		batches := (tiles + batch - 1) / batch
		least := time.Duration(float64(max(batches-burst, 0))/perSecond*float64(time.Second)) + 3*rtt
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			r.reset(b)
			th.Reset()
			b.StartTimer()
			res := r.tilectl(b, url, 5*time.Minute, nil)
			b.StopTimer()
			if res.exit != 0 && res.exit != 3 {
				b.Fatalf("tilectl exited %d:\n%s", res.exit, tail(res.stderr))
			}
			held := r.sink.Held()
			st := th.Stats()
			posts, refused := st.Posts, st.Refused
			rate := float64(held) / res.elapsed.Seconds()
			if held < tiles {
				// A run that left tiles unsent has not done the job,
				// however fast it was with the rest.
				b.Logf("throttled, burst %d: %d of %d tiles left unsent: reported as 0 tiles/s", burst, tiles-held, tiles)
				rate = 0
			}
			b.ReportMetric(rate, "tilectl-tiles/s")
			b.ReportMetric(perSecond*batch, "allowed-tiles/s")
			b.ReportMetric(float64(tiles)/least.Seconds(), "least-tiles/s")
			b.ReportMetric(float64(refused)/float64(max(posts, 1)), "share-429")
			b.ReportMetric(res.number("timeouts"), "timeouts")
			b.Logf("throttled, burst %d: tilectl exit %d, %d of %d tiles in %v (%.0f tiles/s, %d allowed; the bucket's least time %v), %d of %d batch requests refused",
				burst, res.exit, held, tiles, res.elapsed.Round(time.Millisecond), float64(held)/res.elapsed.Seconds(),
				perSecond*batch, least.Round(time.Millisecond), refused, posts)
			b.StartTimer()
		}
	}
}

// benchBwlimit runs tilectl --bwlimit 2M on the cellular link (30 Mbit/s,
// 3.6 MiB/s) and reports the rate the link carried between 5% and 95% of
// the run's bytes (achieved-MiB/s) and its distance from 2 MiB/s
// (bwlimit-error). Without --bwlimit in upload-pending it reports nothing:
// the rows show as not measured.
func benchBwlimit(b *testing.B) {
	if !hasFlag(b, "--bwlimit") {
		b.Log("upload-pending has no --bwlimit: not measured")
		return
	}
	const want = 2 << 20 // bytes per second
	p := profiles[0]
	r := newRig(b, "Lbwlimit", 1000, p.size, p.maxBatchTiles)
	l, url := newLink(b, r.sink.URL, p.rate, p.rtt)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r.reset(b)
		b.StartTimer()
		m := startMeter(l)
		res := r.tilectl(b, url, 5*time.Minute, nil, "--bwlimit", "2M")
		s := m.close()
		b.StopTimer()
		if res.exit != 0 {
			b.Fatalf("tilectl exited %d:\n%s", res.exit, tail(res.stderr))
		}
		got := steadyRate(s)
		b.ReportMetric(got/(1<<20), "achieved-MiB/s")
		b.ReportMetric(abs(got/want-1), "bwlimit-error")
		b.Logf("bwlimit 2M: the link carried %.3f MiB/s (%v in all)", got/(1<<20), res.elapsed.Round(time.Millisecond))
		b.StartTimer()
	}
}

// steadyRate is bytes per second between the samples where 5% and 95% of
// the bytes had passed: the run's start and its last batches left out.
func steadyRate(s []sample) float64 {
	if len(s) < 2 {
		return 0
	}
	total := s[len(s)-1].bytes
	var a, z sample
	for _, x := range s {
		if a.at.IsZero() && x.bytes >= total/20 {
			a = x
		}
		if x.bytes <= total*19/20 {
			z = x
		}
	}
	if !z.at.After(a.at) {
		return 0
	}
	return float64(z.bytes-a.bytes) / z.at.Sub(a.at).Seconds()
}
