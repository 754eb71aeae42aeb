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

// The bytes are acknowledged at a steady 168 kB/s; for 2 s, five batches
// settle every slopeMinStep (their bodies at the same rate), and then one
// every 400 ms (the provider answers slower, or the tail): the settled
// bodies' rate is the delivery rate only while at least settledMinBatches
// settle in each of its latest steps. From then on the rate shown is the
// acknowledged bytes' again, within a fifth of 168 kB/s, never a known
// 0 B/s while they move, and the ETA stays known.
func TestTheSettledRateServesOnlyWhileBatchesSettleOften(t *testing.T) {
	t.Parallel()
	const (
		tiles, size, perBatch = 8000, 456, 4
		rate                  = 168_000.0
	)
	body := int64(perBatch * (size + wireOverheadPerTile)) // 3,360 B: five a step at 168 kB/s
	start := time.Unix(1_700_000_000, 0)
	now := start
	p := newProgress("F", tiles, tiles*size, nil, true, zerolog.Nop(), nil, time.Second, metricsfile.New(), func() time.Time { return now })
	sent := unlimitedSent(t)
	sock := &fakeSockets{lag: 100 * time.Millisecond}
	p.countWire(sent, sock)
	sent.n.Add(int64(tiles/perBatch) * body)
	settled := 0
	const dt = 5 * time.Millisecond
	for el := dt; el <= 10*time.Second; el += dt {
		now = start.Add(el)
		acked := int64(rate * el.Seconds())
		due := int(el / (20 * time.Millisecond)) // five a step
		if el > 2*time.Second {
			due = 100 + int((el-2*time.Second)/(400*time.Millisecond))
		}
		for ; settled < due; settled++ {
			sock.answers = append(sock.answers, sockmeter.Answer{At: now, Acked: acked})
			p.batch(uploader.BatchProgress{OpID: fmt.Sprint(settled), Tiles: perBatch, Bytes: perBatch * size, Uploaded: perBatch})
		}
		sock.acked, sock.inFlight = acked, acked-p.delivered.Load()
		if el%slopeMinStep == 0 {
			p.lookDelivered()
		}
		if el%redrawEvery != 0 || el < 2500*time.Millisecond {
			continue
		}
		look, _, etaOK := p.glance()
		if !look.rateOK || math.Abs(look.bps/rate-1) > 0.2 {
			t.Errorf("%s in, a batch settling every 400 ms: rate %.0f B/s (known %v), the bytes acknowledged at %.0f B/s",
				el, look.bps, look.rateOK, rate)
		}
		if !etaOK {
			t.Errorf("%s in: no ETA while the bytes are acknowledged at %.0f B/s", el, rate)
		}
	}
}

// An earlier run's open batches, adopted and settled from the provider's
// record (replayed: this run sends no body for them), settle four a
// step before this run hands over a body: they tell nothing of the link,
// and neither the rate nor the ETA is known from them. Once this run's
// bodies go out and are acknowledged at 1 MB/s, the rate is that, not
// the replayed batches' that keep settling.
func TestBatchesThisRunDidNotSendGiveNoRate(t *testing.T) {
	t.Parallel()
	const tiles, size = 64, 1 << 20
	start := time.Unix(1_700_000_000, 0)
	now := start
	p := newProgress("F", tiles, tiles*size, nil, true, zerolog.Nop(), nil, time.Second, metricsfile.New(), func() time.Time { return now })
	sent := unlimitedSent(t)
	sock := &fakeSockets{lag: 100 * time.Millisecond}
	p.countWire(sent, sock)
	for i := range 12 {
		if i%4 == 0 {
			now = now.Add(slopeMinStep)
			p.lookDelivered()
		}
		p.batch(uploader.BatchProgress{OpID: fmt.Sprint(i), Tiles: 1, Bytes: size, Uploaded: 1, Replayed: true})
	}
	for range 4 {
		now = now.Add(slopeMinStep)
		p.lookDelivered()
		if look, eta, etaOK := p.glance(); look.rateOK || etaOK {
			t.Fatalf("%s in, 12 replayed batches settled and no body sent: rate %.0f B/s (known %v), ETA %s (known %v)",
				now.Sub(start), look.bps, look.rateOK, eta, etaOK)
		}
	}
	sent.n.Add(32 * (size + wireOverheadPerTile))
	for i := 12; i < 48; i++ {
		if i%4 == 0 {
			now = now.Add(slopeMinStep)
			sock.acked += 100_000
			sock.inFlight = sock.acked
			if bps, ok := p.rate(); ok && math.Abs(bps/1e6-1) > 0.2 {
				t.Fatalf("%s in, this run's bodies acknowledged at 1 MB/s and replayed batches settling 4 a step: rate %.0f B/s",
					now.Sub(start), bps)
			}
		}
		p.batch(uploader.BatchProgress{OpID: fmt.Sprint(i), Tiles: 1, Bytes: size, Uploaded: 1, Replayed: true})
	}
	if bps, ok := p.rate(); !ok {
		t.Fatalf("after 36 looks at bytes acknowledged at 1 MB/s, no rate (%.0f B/s)", bps)
	}
}

// A step of the settled bodies counts toward agreeing only where the
// bytes acknowledged grew in it and did not run ahead of the settled
// bodies by more than slopeSpread: batches settling while nothing is
// acknowledged make no rate, and neither do agreeing steps of which an
// earlier one had the acknowledged bytes running ahead (the queue still
// filling), however the latest one looks.
func TestASettledStepCountsOnlyWhereTheAcknowledgedBytesGrewAndWereNotAhead(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	newSettled := func() *slope {
		return &slope{stableSpan: settledStableSpan, stableOnly: true, minBatches: settledMinBatches}
	}
	const step, batches = 400_000, 5

	flat := newSettled()
	for i := 1; i <= 10; i++ {
		flat.observeSettled(start.Add(time.Duration(i)*slopeMinStep), int64(i)*step, int64(i)*batches, 1_000_000)
		if bps, ok := flat.rate(); ok {
			t.Fatalf("after %d looks with nothing more acknowledged, a rate %.0f B/s", i, bps)
		}
	}

	ahead := newSettled()
	acks := []int64{0, 0, 1_000_000, 400_000, 400_000} // the second step's acknowledged bytes run ahead
	var acked int64
	for i := 1; i < len(acks); i++ {
		acked += acks[i]
		ahead.observeSettled(start.Add(time.Duration(i)*slopeMinStep), int64(i)*step, int64(i)*batches, acked)
		if i == 3 {
			if bps, ok := ahead.rate(); ok {
				t.Fatalf("steps agreeing over %s, the first of them with the bytes acknowledged running ahead: a rate %.0f B/s",
					settledStableSpan, bps)
			}
		}
	}
}
