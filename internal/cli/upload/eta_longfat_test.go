package upload

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/sockmeter"
	"github.com/tilectl/tilectl/uploader"
)

// longFat is a long fat link as the sockets see it, looked at every 250
// ms: 25 MB/s (200 Mbit/s), each batch (four 16 KiB tiles) answered 150
// ms after its body crossed; the link is busy from the first body on.
// acked is the count acknowledged at a time since the start: ahead of
// the link while its queue fills.
type longFat struct {
	t          *testing.T
	acked      func(since time.Duration) int64
	tiles      int
	p          *progress
	sock       *fakeSockets
	start, now time.Time
}

const (
	longFatRate     = 25e6 // bytes a second
	longFatFixed    = 150 * time.Millisecond
	longFatPerBatch = 4
	longFatTile     = 16 << 10
	longFatBody     = longFatPerBatch * (longFatTile + wireOverheadPerTile)
)

func newLongFat(t *testing.T, tiles int, acked func(time.Duration) int64) *longFat {
	l := &longFat{t: t, acked: acked, tiles: tiles, sock: &fakeSockets{lag: longFatFixed, held: map[string]int64{}},
		now: time.Unix(1_700_000_000, 0)}
	l.start = l.now
	var sent *sentCounter
	l.p, sent = wiredProgress(t, tiles, longFatTile, &l.now, l.sock)
	sent.n.Add(l.whole())
	return l
}

func (l *longFat) whole() int64 { return int64(l.tiles / longFatPerBatch * longFatBody) }

// answeredAt is when the batch whose body ends at count c is answered.
func (l *longFat) answeredAt(c int64) time.Time {
	return l.start.Add(time.Duration(float64(c)/longFatRate*float64(time.Second)) + longFatFixed)
}

// end is when the last batch is answered.
func (l *longFat) end() time.Time { return l.answeredAt(l.whole()) }

// look moves the clock to the next look, answers and settles the batches
// due by then, and returns the ETA.
func (l *longFat) look() (time.Duration, bool) {
	l.now = l.now.Add(250 * time.Millisecond)
	answered := len(l.sock.answers)
	for c := int64(answered+1) * longFatBody; c <= l.whole() && !l.answeredAt(c).After(l.now); c += longFatBody {
		answered++
		l.sock.answers = append(l.sock.answers, sockmeter.Answer{At: l.answeredAt(c), Acked: c})
		l.p.batch(uploader.BatchProgress{OpID: fmt.Sprint(answered), Tiles: longFatPerBatch,
			Bytes: longFatPerBatch * longFatTile, Uploaded: longFatPerBatch})
	}
	acked := min(l.acked(l.now.Sub(l.start)), l.whole())
	l.sock.acked, l.sock.inFlight = acked, acked-int64(answered)*longFatBody
	l.p.lookDelivered()
	return l.p.eta()
}

// checkETA looks until the last answer and fails where the ETA, from a
// quarter of the flight settled on until half a second before the end,
// is not known or not within within of the time really left. It returns
// how many of the looks it checked found the acknowledged count's rate
// not known.
func (l *longFat) checkETA(within float64) (ackedUnknown int) {
	for l.now.Before(l.end()) {
		eta, ok := l.look()
		left := l.end().Sub(l.now)
		if l.p.bytes.Load()*4 < int64(l.tiles*longFatTile) || left < 500*time.Millisecond {
			continue
		}
		if _, known := l.p.deliveredRate.rate(); !known {
			ackedUnknown++
		}
		if !ok || math.Abs(eta.Seconds()/left.Seconds()-1) > within {
			l.t.Errorf("%s in, %s really left: ETA %s (known %v)", l.now.Sub(l.start), left, eta.Round(10*time.Millisecond), ok)
		}
	}
	return ackedUnknown
}

// On a long fat link the bottleneck's queue fills in the run's first
// second: the count acknowledged grows at 32 MB/s while the link carries
// 25 MB/s, and the batches' answers come at the link's rate. The bytes
// behind an answer cross at the link's rate: from a quarter done on the
// ETA is within 5% of the time left, not a fifth early.
func TestTheETAsRateIsTheAnswersNotAQueueFilling(t *testing.T) {
	t.Parallel()
	l := newLongFat(t, 2000, func(since time.Duration) int64 {
		return int64(min(32e6*since.Seconds(), 32e6+longFatRate*(since.Seconds()-1)))
	})
	l.checkETA(0.05)
}

// The count acknowledged moves unevenly while the long fat link's queue
// fills and empties (36, 26, 18 and 23 MB/s between looks: no two in a
// row agree), so its rate is not known in the run's first second; the
// answers come at the link's rate all along, and the ETA is shown from
// theirs, within 5% of the time left, from a quarter done on.
func TestTheETAIsShownFromTheAnswersRateWhileTheAcknowledgedRateIsNotKnown(t *testing.T) {
	t.Parallel()
	steps := []float64{9e6, 6.5e6, 4.5e6, 5.75e6} // bytes a look, then 25 MB/s
	l := newLongFat(t, 2000, func(since time.Duration) int64 {
		var n float64
		for i, s := range steps {
			if since <= time.Duration(i)*250*time.Millisecond {
				return int64(n)
			}
			n += s
		}
		return int64(n + longFatRate*(since-time.Second).Seconds())
	})
	if l.checkETA(0.05) == 0 {
		t.Error("the acknowledged count's rate was known at every look checked: the test shows nothing of the answers' rate standing in for it")
	}
}
