package uploader

import (
	"context"
	"sync"
	"time"

	"github.com/tilectl/tilectl/uploader/concurrency"
)

// pacer spaces the starts of one uploader's requests by a shared least
// interval, which the provider's answers set: a throttle with advice (429
// or 503 with Retry-After or the retry extension's "after") raises it to
// what the provider has just shown it takes, and answers that are not
// throttles ease it off again: while the throttle is recent, slowly and
// no faster than the rate the provider was measured to take (a pace over
// it comes to the next refusal); a while after, slowly past it (a limit
// may have risen); faster once it is long past, until it is zero (no
// pacing). A provider's rate is counted from a refusal on where it can
// be: right after a refusal the provider's allowance is spent, so what it
// takes from then on is its sustained rate, without the burst a rested
// provider lets through first (which would set a pace it cannot keep up).
// Refusals that come at any pace (what the provider takes falls with the
// pace: injected faults, not a limit on rate) stop the pacing for a while.
// rclone's lib/pacer keeps one such interval for all calls of a backend;
// here the limit on batches in flight (concurrency.Controller) says how
// many may be on the wire, the pacer how often one may start: a provider
// that limits requests a second, not requests at once, is met at its rate
// instead of by a storm of refusals and waits.
//
// A throttled request's own wait (Retry-After, journaled for a batch) is
// the sender's business; the pacer never holds the other requests longer
// than that advice, and not at all while it is zero. It reads time only
// through now and waits only through sleep, so tests drive it with a fake
// clock. It is safe for concurrent use.
type pacer struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu       sync.Mutex
	interval time.Duration // least time between two starts; 0: none
	next     time.Time     // the earliest start of the next request
	raised   time.Time     // when a throttle last raised the interval
	took     float64       // the rate, per second, the provider allowed then
	// held is the pace, per second, that easing stops at while the last
	// raise is within paceMemory: the rate the provider took then, less
	// the one answer a count over the span may be off by; 0: none.
	held float64
	// first is the rate measured at the first raise of this run of
	// pacing, replaced by the first one counted from a refusal
	// (firstClean); quiet, when pacing is suspended until (paceFollow).
	first      float64
	firstClean bool
	quiet      time.Time
	started    time.Time // the first answer's end
	eased      time.Time // when an answer last eased it
	// ends are the times of the latest answers that were not throttles,
	// a ring of endsCap: how many the provider took since a time.
	ends [endsCap]time.Time
	head int
	n    int
	// refusals are the times of the latest throttles with advice, a ring
	// of refusalsCap: when the provider's allowance was spent.
	refusals [refusalsCap]time.Time
	rhead    int
	rn       int
}

const (
	// paceWindow is the least span over which the provider's rate is
	// measured (one counted from a refusal starts at least this far back,
	// unless more answers came since than the ring of them holds: then it
	// is over the ring's; without one, it is the span). A throttle of a
	// request that started before the last raise does not raise again:
	// the requests already in flight when a throttle comes are refused
	// too, and say nothing new.
	paceWindow = time.Second
	// paceMargin is the share of the rate a throttle showed that the
	// interval is raised to: a little under it, so the provider's bucket
	// refills and the next refusal is a while off.
	paceMargin = 0.9
	// easeNear and easeFar are how fast the rate grows, per second of
	// answers that are not throttles: slowly, and only up to the rate the
	// provider was measured to take (held), while the last raise is within
	// paceMemory (the provider's limit is probably where it was); slowly
	// past it for another paceMemory (a probe: a limit that rose is found
	// with one refusal, as the provider's saved-up allowance runs out);
	// faster afterwards (it may have gone). A refusal more than paceMemory
	// back is not counted from: what the provider took since says little
	// of what it takes now.
	easeNear   = 0.03
	easeFar    = 0.25
	paceMemory = 10 * time.Second
	// paceFollow: when what the provider takes falls below this share of
	// what it took at the first raise of a run of pacing that counted from
	// a refusal (a rate that may hold a burst is no measure to fall from),
	// its refusals follow the pace instead of a limit, and pacing stops
	// for paceMemory.
	paceFollow = 0.7
	// paceFloor: an interval below it is no pacing at all.
	paceFloor = time.Millisecond
	// paceStep: a throttle with no rate to measure (no refusal to count
	// from, and no full window of answers) raises the interval by half, to
	// a quarter of paceStep at least.
	paceStep = 50 * time.Millisecond
	// paceCap bounds the interval when the throttle gave no wait.
	paceCap     = 5 * time.Second
	endsCap     = 512
	refusalsCap = 64
)

func newPacer(now func() time.Time, sleep func(context.Context, time.Duration) error) *pacer {
	return &pacer{now: now, sleep: sleep}
}

// wait returns when a request may start: at least interval after the
// previous start. It returns ctx's error if ctx ends first.
func (p *pacer) wait(ctx context.Context) error {
	p.mu.Lock()
	if p.interval == 0 {
		p.mu.Unlock()
		return nil
	}
	now := p.now()
	start := p.next
	if start.Before(now) {
		start = now
	}
	p.next = start.Add(p.interval)
	p.mu.Unlock()
	if d := start.Sub(now); d > 0 {
		return p.sleep(ctx, d)
	}
	return nil
}

// answered takes in an attempt's verdict; started is when the attempt
// went on the wire. A throttle raises the interval, any other answer eases
// it (no answer at all says nothing about rate); a throttle of a request
// that started before the last raise was sent at the old pace and says
// nothing new. It reports whether the throttle is news for the limit on
// batches in flight (cut, see raise), and whether the pacer keeps the
// starts under the provider's rate after it (paced: the limit then only
// has to carry that rate, concurrency.Sample.Paced).
func (p *pacer) answered(v verdict, started time.Time) (cut, paced bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	switch {
	case v.hasSignal && v.signal == concurrency.Overloaded:
		if v.floor == 0 {
			// A throttle without advice is a fault the breaker and the
			// backoff answer, not a rate to keep to.
			return true, false
		}
		if now.Before(p.quiet) {
			// While pacing is suspended the limit on batches in flight
			// answers alone.
			return true, false
		}
		if !p.raised.IsZero() && started.Before(p.raised) {
			p.refused(now)
			return false, p.interval > 0
		}
		cut = p.raise(now, v.floor)
		p.refused(now)
		return cut, p.interval > 0
	case v.status != 0:
		p.ease(now)
	}
	return false, false
}

// raise lengthens the interval to what keeps a little under the rate the
// provider took (a throttle at this interval says it is too short: a
// little longer than it at least), counted from a refusal where one is at
// least paceWindow and at most paceMemory back, else over the last
// paceWindow of answers (measure). Where neither tells it (the run's
// first answers), it is a guess: the interval grows by half at least, and the pace grows back fast
// until a throttle measures it. advice (the throttle's wait, 0 if none)
// caps it, so no request is held longer than the provider asked.
//
// cut reports whether the limit on batches in flight should come down
// too: when the provider's rate was not known, or it now takes less than
// it did at the last raise. A throttle at about the rate it took before is
// the pacer's own probe going over, which the interval answers.
func (p *pacer) raise(now time.Time, advice time.Duration) (cut bool) {
	took, span, clean := p.measure(now)
	var iv time.Duration
	if p.interval == 0 {
		p.first, p.firstClean = 0, false // a new run of pacing
	}
	if took > 0 && (clean || span >= paceWindow) {
		rate := float64(took) / span.Seconds()
		if p.first == 0 || clean && !p.firstClean {
			// The first rate counted from a refusal replaces one that
			// may hold the provider's burst, which no later rate would
			// come near.
			p.first, p.firstClean = rate, clean
		} else if p.firstClean && rate < paceFollow*p.first {
			// What the provider takes fell with the pace: its refusals
			// come at any pace (faults, not a limit on rate), and pacing
			// would only slow the run down. It stops for a while.
			p.interval, p.took, p.held, p.first, p.quiet = 0, 0, 0, 0, now.Add(paceMemory)
			return true
		}
		iv = max(time.Duration(float64(time.Second)/(paceMargin*rate)), p.interval+p.interval/20)
		cut = p.took == 0 || rate < paceMargin*p.took
		p.took = rate
		p.held = float64(took-1) / span.Seconds()
	} else {
		iv = max(p.interval+p.interval/2, paceStep/4)
		if took > 0 {
			iv = max(iv, time.Duration(float64(span)/(paceMargin*float64(took))))
		}
		cut, p.took, p.held = true, 0, 0
	}
	limit := paceCap
	if advice > 0 {
		limit = min(limit, advice)
	}
	p.interval = min(iv, limit)
	p.raised, p.eased = now, now
	return cut
}

// ease shortens the interval by the growth rate for the time since the
// last ease, and records the answer for the rate. It grows fast while the
// pace is well under the rate the provider last allowed (or that is long
// past), slowly near it, and not past held while the raise is recent: a
// pace over what the provider sustains spends its allowance and comes to
// a refusal, whose advised wait holds its request back (at the end of a
// run, the run with it).
func (p *pacer) ease(now time.Time) {
	p.ends[p.head] = now
	p.head = (p.head + 1) % endsCap
	p.n = min(p.n+1, endsCap)
	if p.started.IsZero() {
		p.started = now
	}
	if p.interval == 0 {
		return
	}
	dt := min(now.Sub(p.eased), paceWindow)
	p.eased = now
	if dt <= 0 {
		return
	}
	g := easeNear
	if pace := float64(time.Second) / float64(p.interval); now.Sub(p.raised) > 2*paceMemory || pace < paceMargin*paceMargin*p.took || p.took == 0 {
		g = easeFar
	}
	iv := p.interval - time.Duration(float64(p.interval)*g*dt.Seconds())
	if p.held > 0 && now.Sub(p.raised) <= paceMemory {
		iv = max(iv, min(p.interval, time.Duration(float64(time.Second)/p.held)))
	}
	p.interval = iv
	if p.interval < paceFloor {
		p.interval = 0
	}
}

// measure is how many answers that were not throttles the provider gave
// over span before now. clean says the span starts at a refusal: the
// latest at least paceWindow and at most paceMemory back (of the refusals
// the ring keeps). Without one it
// is recent's window, which holds whatever burst the provider had saved
// up at its start.
func (p *pacer) measure(now time.Time) (took int, span time.Duration, clean bool) {
	var from time.Time
	for i := 1; i <= p.rn; i++ {
		t := p.refusals[(p.rhead-i+refusalsCap)%refusalsCap]
		if now.Sub(t) > paceMemory {
			break
		}
		if now.Sub(t) >= paceWindow {
			from = t
			break
		}
	}
	if from.IsZero() {
		took, span = p.recent(now)
		return took, span, false
	}
	for i := 1; i <= p.n; i++ {
		t := p.ends[(p.head-i+endsCap)%endsCap]
		if !t.After(from) {
			break
		}
		if i == endsCap {
			// The ring does not reach back to the refusal: count from
			// its oldest answer, over as many answers as it holds.
			from = t
			break
		}
		took++
	}
	return took, now.Sub(from), true
}

// refused records a throttle with advice that ended at now, while a pace
// measured from the provider's answers is in force: what the provider took
// after a refusal under a guessed pace may be held down by that guess.
func (p *pacer) refused(now time.Time) {
	if p.took == 0 {
		return
	}
	p.refusals[p.rhead] = now
	p.rhead = (p.rhead + 1) % refusalsCap
	p.rn = min(p.rn+1, refusalsCap)
}

// recent is how many answers that were not throttles ended in the window
// before now, and the span they are counted over: the window, or less
// when the first answer came within it (at least paceStep).
func (p *pacer) recent(now time.Time) (int, time.Duration) {
	c := 0
	for i := 1; i <= p.n; i++ {
		t := p.ends[(p.head-i+endsCap)%endsCap]
		if now.Sub(t) > paceWindow {
			break
		}
		c++
	}
	span := paceWindow
	if !p.started.IsZero() && now.Sub(p.started) < span {
		span = max(now.Sub(p.started), paceStep)
	}
	return c, span
}

// current is the interval in force, for reports and tests.
func (p *pacer) current() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.interval
}
