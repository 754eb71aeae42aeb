package upload

import (
	"slices"
	"sync"
	"time"

	"github.com/tilectl/tilectl/internal/sockmeter"
)

// crossing is the rate the batch bodies cross the path at, told by their
// answers: each answer comes a while after its body crossed the path's
// bottleneck, with the count acknowledged when its body was
// (sockmeter.Answer), and every byte counted between two answers' bodies
// crossed between the two answers. Where the path holds a queue, the
// acknowledged count runs ahead of the path while the queue fills (the
// start of a run on a long fat link) and behind it while it drains; the
// answers go at the path's own rate while it is kept busy.
//
// It is the slope of the answers of the last slopeWindow (a least-squares
// fit of their counts to their times), the oldest third of the time from
// the first of them to now left out: a run's first answers come back
// before the path is kept busy, slower, whatever the shape of that ramp,
// and three times it after the first answer, it is out of the fit. It is known once the answers
// fitted are at least crossingMinAnswers spanning crossingMinSpan. Once
// known, it follows the path when answers come seldom (a lowered
// --bwlimit, a link that slowed: fewer than crossingMinAnswers in the
// window's later part) as the slope of the latest crossingMinAnswers
// answers, however old, rather than keep what it found while they came
// often, unless two of them are more than slopeWindow apart: that is a
// pause (every batch waiting out a provider's advice, a breaker's
// cool-down), not a slower path, and the rate found before it holds
// until the answers after it make their own. When none come at all (a
// stall, which the acknowledged count tells), it is the last one found. The answers come when they
// come, however long between them, so a count that moves in lumps has
// the lumps' rate, never a step of nothing. It is safe for concurrent
// use.
type crossing struct {
	mu    sync.Mutex
	at    time.Time // of the look that found bps
	bps   float64
	known bool
}

const (
	crossingMinAnswers = 3
	crossingMinSpan    = 200 * time.Millisecond
)

// observe finds the rate from answers (oldest first) at now. A look
// older than the one that found the rate (two looks at once: the
// redraw's and a state change's) leaves it as it is.
func (c *crossing) observe(now time.Time, answers []sockmeter.Answer) {
	c.mu.Lock()
	known := c.known
	c.mu.Unlock()
	bps, ok := crossingRate(now, answers, known)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok && !now.Before(c.at) {
		c.at, c.bps, c.known = now, bps, true
	}
}

// rate is the bytes per second the bodies cross the path at; ok is false
// until it is known.
func (c *crossing) rate() (bytesPerSec float64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bps, c.known
}

// crossingRate is the slope at now of answers (oldest first): those of
// the last slopeWindow, less those in the oldest third of the time from
// the first of them to now; or,
// when too few are left and the rate was known (sparse), the latest
// crossingMinAnswers. ok is false when neither makes a fit (see
// crossing).
func crossingRate(now time.Time, answers []sockmeter.Answer, sparse bool) (float64, bool) {
	recent := answers
	if i := slices.IndexFunc(answers, func(a sockmeter.Answer) bool { return !a.At.Before(now.Add(-slopeWindow)) }); i >= 0 {
		recent = answers[i:]
		from := recent[0].At.Add(now.Sub(recent[0].At) / 3)
		if j := slices.IndexFunc(recent, func(a sockmeter.Answer) bool { return !a.At.Before(from) }); j >= 0 {
			recent = recent[j:]
		} else {
			recent = nil
		}
	} else {
		recent = nil
	}
	if len(recent) < crossingMinAnswers && sparse {
		recent = answers[max(len(answers)-crossingMinAnswers, 0):]
		for i := 1; i < len(recent); i++ {
			if recent[i].At.Sub(recent[i-1].At) > slopeWindow {
				return 0, false // a pause between them, not a slower path
			}
		}
	}
	if len(recent) < crossingMinAnswers || recent[len(recent)-1].At.Sub(recent[0].At) < crossingMinSpan {
		return 0, false
	}
	bps := leastSquaresSlope(recent)
	return bps, bps > 0
}

// leastSquaresSlope is the slope, in bytes per second, of the answers'
// counts over their times: an answer's count is read at the sockets'
// first look that saw its body all acknowledged, so each is late by up to
// a look, and a fit over all of them evens that out where two of them
// would not.
func leastSquaresSlope(answers []sockmeter.Answer) float64 {
	t0 := answers[0].At
	var mt, mc float64
	for _, a := range answers {
		mt += a.At.Sub(t0).Seconds()
		mc += float64(a.Acked)
	}
	n := float64(len(answers))
	mt, mc = mt/n, mc/n
	var sxy, sxx float64
	for _, a := range answers {
		dt := a.At.Sub(t0).Seconds() - mt
		sxy += dt * (float64(a.Acked) - mc)
		sxx += dt * dt
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}
