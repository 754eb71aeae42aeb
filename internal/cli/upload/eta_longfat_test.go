package upload

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/internal/metricsfile"
	"github.com/tilectl/tilectl/internal/sockmeter"
	"github.com/tilectl/tilectl/uploader"
)

// A long fat link (25 MB/s, 150 ms round trip, 2,000 tiles of 16 KiB in
// batches of 4) as the sockets see it: nothing for the run's first
// 350 ms (capabilities, claims), then the connections' buffers take
// 1.85 MB at once, nothing more for a round trip, and then the path's
// 5 MB queue fills at 45 MB/s until it is full; from then on the bytes
// are acknowledged as the link carries them. A batch is answered a
// round trip after its last byte crossed the link. The whole run lasts
// under two seconds, so its first quarter is done while the queue has
// barely stopped filling: the progress looks at the counts every
// slopeMinStep, and from a quarter done on until half a second before
// the last answer, the ETA of the lines every 250 ms is known and within
// a fifth of the time really left.
func TestTheETAIsKnownFromAQuarterDoneOnALongFatLink(t *testing.T) {
	t.Parallel()
	const (
		tiles, size, perBatch = 2000, 16 << 10, 4
		rate, queue           = 25e6, 5e6
		fill, buffers         = 45e6, 1.85e6
		rtt                   = 150 * time.Millisecond
	)
	body := int64(perBatch * (size + wireOverheadPerTile))
	whole := int64(tiles/perBatch) * body
	start := time.Unix(1_700_000_000, 0)
	now := start
	p := newProgress("F", tiles, tiles*size, nil, true, zerolog.Nop(), nil, time.Second, metricsfile.New(), func() time.Time { return now })
	sent := unlimitedSent(t)
	sock := &fakeSockets{lag: -1}
	p.countWire(sent, sock)

	first := 350 * time.Millisecond // the first bodies handed over
	var acked, crossed float64
	ackedAt := map[int]int64{}          // batch -> the acknowledged count when its last byte was
	answerAt := map[int]time.Duration{} // batch -> when its answer comes
	settled := 0
	type line struct {
		at   time.Duration
		done int64
		eta  time.Duration
		ok   bool
	}
	var lines []line
	const dt = 5 * time.Millisecond
	var el time.Duration
	for el = dt; settled < tiles/perBatch; el += dt {
		now = start.Add(el)
		switch {
		case el < first:
		case el < first+dt:
			sent.n.Add(whole) // every body is handed to the connections
			acked = buffers
		case el < first+rtt:
		default:
			acked = min(acked+fill*dt.Seconds(), crossed+queue, float64(whole))
		}
		if el > first {
			crossed = min(crossed+rate*dt.Seconds(), acked)
		}
		for k := len(ackedAt); k < tiles/perBatch && float64(int64(k+1)*body) <= acked; k++ {
			ackedAt[k] = int64(acked)
		}
		for k := len(answerAt); k < tiles/perBatch && float64(int64(k+1)*body) <= crossed; k++ {
			answerAt[k] = el + rtt
		}
		for settled < len(answerAt) && answerAt[settled] <= el {
			lag := time.Duration(0)
			if sock.lag < 0 {
				lag = rtt + time.Duration(queue/rate*float64(time.Second))
				sock.lag = lag
			}
			sock.answers = append(sock.answers, sockmeter.Answer{At: now, Acked: ackedAt[settled]})
			p.batch(uploader.BatchProgress{OpID: fmt.Sprint(settled), Tiles: perBatch, Bytes: perBatch * size, Uploaded: perBatch})
			settled++
		}
		sock.acked = int64(acked)
		sock.inFlight = int64(acked) - p.delivered.Load()
		if el%slopeMinStep == 0 {
			p.lookDelivered()
		}
		if el%redrawEvery == 0 { // a progress line
			eta, ok := p.eta()
			lines = append(lines, line{el, p.bytes.Load(), eta, ok})
		}
	}
	end := el - dt
	checked, worst := 0, 0.0
	for _, l := range lines {
		left := end - l.at
		if l.done*4 < tiles*size || left < 500*time.Millisecond {
			continue
		}
		checked++
		if !l.ok {
			t.Errorf("%s in, %d%% done, %s before the end: no ETA", l.at, l.done*100/(tiles*size), left)
			continue
		}
		e := math.Abs(l.eta.Seconds()/left.Seconds() - 1)
		worst = max(worst, e)
		if e > 0.2 {
			t.Errorf("%s in, %d%% done: ETA %s with %s really left (off by %.2f)", l.at, l.done*100/(tiles*size),
				l.eta.Round(10*time.Millisecond), left, e)
		}
	}
	t.Logf("run of %s, %d lines from a quarter done on, worst ETA error %.3f", end, checked, worst)
	if checked < 2 {
		t.Fatalf("%d lines from a quarter done on, over a run of %s: the shape is not the long fat link's", checked, end)
	}
}

// The settled bodies' rate is the link's: not two steps of the first
// answers that agree while the bytes acknowledged still run ahead of
// them (the path's queue filling), nor a batch settling every other look
// (lumps); once the queue is full and the answers come at the link's
// rate, two steps over settledStableSpan make it known, at that rate
// alone.
func TestTheSettledRateIsTheLinksOnceTheQueueIsFull(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	newSettled := func() *slope {
		return &slope{stableSpan: settledStableSpan, stableOnly: true, minBatches: settledMinBatches}
	}
	const body = 67_072
	s := newSettled()
	var n, batches, acked int64
	for i := 1; i <= 8; i++ {
		now := start.Add(time.Duration(i) * slopeMinStep)
		step, ahead := int64(1_800_000), int64(3_200_000) // 18 MB/s answered, 32 MB/s acknowledged
		if i > 4 {
			step, ahead = 2_500_000, 2_500_000 // 25 MB/s both
		}
		n, batches, acked = n+step, batches+step/body, acked+ahead
		s.observeSettled(now, n, batches, acked)
		bps, ok := s.rate()
		switch {
		case i <= 5 && ok:
			t.Fatalf("after %d looks, the queue filling until the 4th, a rate %.0f B/s", i, bps)
		case i >= 6 && (!ok || math.Abs(bps/25e6-1) > 0.02):
			t.Fatalf("after %d looks, two steps at 25 MB/s, the rate is %.0f B/s (known %v)", i, bps, ok)
		}
	}

	lumps := newSettled()
	n, batches, acked = 0, 0, 0
	for i := 1; i <= 30; i++ {
		now := start.Add(time.Duration(i) * slopeMinStep)
		acked += 130_000
		if i%2 == 0 {
			n, batches = n+2*130_000, batches+1
		}
		lumps.observeSettled(now, n, batches, acked)
		if bps, ok := lumps.rate(); ok {
			t.Fatalf("a batch settling every other look: a rate %.0f B/s after %d looks", bps, i)
		}
	}
}
