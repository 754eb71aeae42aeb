package upload

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/sockmeter"
)

// answersAt are answers from start: for each of spans, per answers of
// bytes each, spaced evenly over its duration.
func answersAt(start time.Time, per int, spans ...struct {
	d   time.Duration
	bps float64
}) []sockmeter.Answer {
	var out []sockmeter.Answer
	at, n := start, int64(0)
	for _, s := range spans {
		every := s.d / time.Duration(per)
		for range per {
			at = at.Add(every)
			n += int64(s.bps * every.Seconds())
			out = append(out, sockmeter.Answer{At: at, Acked: n})
		}
	}
	return out
}

// seenBy is the answers (oldest first) that came by now.
func seenBy(answers []sockmeter.Answer, now time.Time) []sockmeter.Answer {
	n, _ := slices.BinarySearchFunc(answers, now, func(a sockmeter.Answer, t time.Time) int {
		if a.At.After(t) {
			return 1
		}
		return -1
	})
	return answers[:n]
}

type span = struct {
	d   time.Duration
	bps float64
}

// The first answers come back before the path is kept busy, slower,
// and on a long fat link they may speed up gradually (17, 19, 21 and 23
// MB/s, 100 ms each: none a fifth slower than the next) before the
// path's 25 MB/s. Once the answers span three times that ramp, their
// rate is the path's, within 2%.
func TestTheAnswersRateLeavesOutTheirRamp(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	const ramp = 400 * time.Millisecond
	answers := answersAt(start, 25, span{100 * time.Millisecond, 17e6}, span{100 * time.Millisecond, 19e6},
		span{100 * time.Millisecond, 21e6}, span{100 * time.Millisecond, 23e6}, span{2 * time.Second, 25e6})
	var c crossing
	for look := 3 * ramp; look <= 2*time.Second; look += 50 * time.Millisecond {
		now := start.Add(look)
		seen := seenBy(answers, now)
		c.observe(now, seen)
		if bps, ok := c.rate(); !ok || math.Abs(bps/25e6-1) > 0.02 {
			t.Fatalf("%s in, the rate is %.0f B/s (known %v), want 25 MB/s", look, bps, ok)
		}
	}
}

// A slow link (a low --bwlimit) with small bodies answers one batch of
// 250 kB every 500 ms, looked at every 100 ms: the rate of the answers
// is the lumps', 500 kB/s, from the fourth answer on (three of them
// after the oldest third of the time), never a rate of nothing from the
// looks between two answers.
func TestAnswersComingInLumpsHaveTheLumpsRateNotZero(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	answers := answersAt(start, 20, span{10 * time.Second, 500e3})
	var c crossing
	for look := 100 * time.Millisecond; look <= 10*time.Second; look += 100 * time.Millisecond {
		now := start.Add(look)
		seen := answers[:int(look/(500*time.Millisecond))]
		c.observe(now, seen)
		bps, ok := c.rate()
		if len(seen) >= 4 && (!ok || math.Abs(bps/500e3-1) > 0.05) {
			t.Fatalf("%s in, %d answers, the rate is %.0f B/s (known %v), want 500 kB/s", look, len(seen), bps, ok)
		}
	}
}

// Once known, the rate of the answers stays known: when no answer came
// for longer than the window (a stall, which the acknowledged count
// tells), it is the last one found, not unknown.
func TestTheAnswersRateOnceKnownStaysKnown(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	answers := answersAt(start, 40, span{time.Second, 1e6})
	var c crossing
	c.observe(start.Add(time.Second), answers)
	if bps, ok := c.rate(); !ok || math.Abs(bps/1e6-1) > 0.05 {
		t.Fatalf("after a second of answers at 1 MB/s, the rate is %.0f B/s (known %v)", bps, ok)
	}
	c.observe(start.Add(time.Second+2*slopeWindow), answers)
	if bps, ok := c.rate(); !ok || math.Abs(bps/1e6-1) > 0.05 {
		t.Fatalf("with no answer for twice the window, the rate is %.0f B/s (known %v), want the last one, 1 MB/s", bps, ok)
	}
}

// When the path slows and the answers come seldom (a --bwlimit lowered
// mid-run, a link that drops: 1 MB/s answered every 100 ms, then 100 kB/s
// answered every 2 s), the rate follows: from the second slow answer on
// it is the new rate, not the last one found while answers came often.
func TestTheAnswersRateFollowsARateDropWhenAnswersGetSparse(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	answers := answersAt(start, 30, span{3 * time.Second, 1e6})
	last := answers[len(answers)-1]
	for i := 1; i <= 5; i++ {
		answers = append(answers, sockmeter.Answer{At: last.At.Add(time.Duration(i) * 2 * time.Second), Acked: last.Acked + int64(i)*200e3})
	}
	var c crossing
	for look := 100 * time.Millisecond; look <= 14*time.Second; look += 100 * time.Millisecond {
		now := start.Add(look)
		seen := seenBy(answers, now)
		slow := 0
		for _, a := range seen {
			if a.At.After(last.At) {
				slow++
			}
		}
		c.observe(now, seen)
		if bps, ok := c.rate(); slow >= 2 && (!ok || math.Abs(bps/100e3-1) > 0.05) {
			t.Fatalf("%s in, %d slow answers 2 s apart, the rate is %.0f B/s (known %v), want 100 kB/s", look, slow, bps, ok)
		}
	}
}

// A pause in the answers (every batch waiting out a provider's advised
// minute, a breaker's cool-down) is not a slower path: the first answers
// after it, with the ones before, would make a slope of the pause. The
// rate stays the one found before it until the answers after it make
// their own.
func TestAPauseInTheAnswersDoesNotSinkTheirRate(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	answers := answersAt(start, 20, span{2 * time.Second, 1e6})
	last := answers[len(answers)-1]
	resume := last.At.Add(30 * time.Second)
	for i := range 5 {
		answers = append(answers, sockmeter.Answer{At: resume.Add(time.Duration(i) * 100 * time.Millisecond), Acked: last.Acked + int64(i+1)*100e3})
	}
	var c crossing
	for look := 100 * time.Millisecond; look <= 33*time.Second; look += 100 * time.Millisecond {
		now := start.Add(look)
		seen := seenBy(answers, now)
		c.observe(now, seen)
		if bps, ok := c.rate(); look >= 2*time.Second && (!ok || math.Abs(bps/1e6-1) > 0.05) {
			t.Fatalf("%s in, %d answers, the rate is %.0f B/s (known %v), want 1 MB/s before and after a 30 s pause", look, len(seen), bps, ok)
		}
	}
}
