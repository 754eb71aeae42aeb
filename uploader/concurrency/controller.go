// Package concurrency decides how many batches an upload keeps in flight.
//
// Controller measures: it grows the limit while the batches' round-trip
// time stays near the least it has seen (the link has room: more batches
// in flight carry more bytes per second) and shrinks it when the round
// trip rises (the batches queue at a bottleneck, which adds latency and no
// throughput), as TCP Vegas does with packets. An overload signal cuts it
// at once, at most once per round trip, as TCP's AIMD does on loss: a
// timeout or the breaker opening halves it; a throttle (429, 503) sets it
// to the batches in flight the provider's rate of answers needs (see cut).
// It starts, before anything is measured, at Initial batches, or at the
// batches an initial window of InitialBytes holds when the run's batches
// are small (ExpectBatchBytes), and grows in slow start from there.
// It never stops adjusting: every
// round trip is a decision, and the least round trip is measured afresh
// every BaseWindow by draining the queue for two round trips, so a link
// that changes (slower, faster, longer) is followed. Fixed is the same
// gate with a limit that does not move.
//
// Both are safe for concurrent use and read time only through the clock
// they are given.
package concurrency

import (
	"context"
	"math"
	"sync"
	"time"
)

// Signal is what a request's end says about the path.
type Signal int

const (
	// Answered: the provider answered; the round trip counts.
	Answered Signal = iota
	// Overloaded: the provider or the path asks for less (429, 503, the
	// breaker opening).
	Overloaded
	// TimedOut: no answer within the request timeout.
	TimedOut
)

// Sample is one request's end: when it started, when it ended, and what
// it said.
type Sample struct {
	Start, End time.Time
	Signal     Signal
	// NewConn says the request went on a connection opened for it. Its
	// round trip carries what a fresh connection costs beyond the dial the
	// sender leaves out of Start (TCP's slow start, a handshake the dial
	// did not wait for), once per connection: a limit that grows opens one
	// per new slot, and those round trips say nothing about a queue on the
	// path. A round's mean leaves them out when it has others.
	NewConn bool
	// Paced says an Overloaded request's throttle is answered by spacing
	// the starts of requests a little under the rate the provider took
	// (the uploader's pacer): the limit then only has to carry that rate.
	Paced bool
}

// Options tune a Controller. Zero fields take the stated defaults.
type Options struct {
	// Initial is the limit before anything is measured. Default 8.
	Initial int
	// InitialBytes is the bytes in flight the limit starts with when the
	// batches are small (ExpectBatchBytes): before anything is measured
	// the limit is the batches InitialBytes holds, at least Initial and
	// at most initialSpread times it. Default 2 MiB.
	InitialBytes int64
	// Floor is the lowest limit a rising round trip alone brings it to;
	// only overload signals go below it. Default 4.
	Floor int
	// Min and Max bound the limit. Defaults 1 and 256.
	Min, Max int
	// BaseWindow is how long the least round trip seen stands before it
	// is measured again. Default 10s.
	BaseWindow time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultInitial      = 8
	DefaultInitialBytes = 2 << 20
	DefaultFloor        = 4
	DefaultMin          = 1
	DefaultMax          = 256
	DefaultBaseWindow   = 10 * time.Second
)

// initialSpread bounds the batches an initial window in bytes starts
// with, in Initials: each batch of the first round opens a connection of
// its own and reaches the provider before any is answered, and tiny
// batches (a few tiles of a few kilobytes) would make that burst
// hundreds, for little payload. Slow start doubles from there.
const initialSpread = 4

// decrease is the factor an overload signal multiplies the limit by.
const decrease = 0.5

// underRate is the share of the rate a throttling provider answered that
// the batches in flight after its throttle are to carry: a little under
// it, in whole batches, so the next throttle is a while off.
const underRate = 0.9

// Near the limit an overload last cut, the limit grows by one every
// ceilingStep; it forgets the ceiling after ceilingMemory without
// overload, so a link or a provider that now allows more is found.
const (
	ceilingStep   = 2 * time.Second
	ceilingMemory = 30 * time.Second
	nearCeiling   = 0.9
	rateWindow    = time.Second
)

type phase int

const (
	steady    phase = iota
	draining        // the limit is halved until the queue it held has gone
	measuring       // the least round trip of batches started now is the new base
)

// Controller is the adaptive limit. See the package comment.
type Controller struct {
	now             func() time.Time
	min, max, floor float64
	baseWindow      time.Duration

	// initial and initialBytes are Options.Initial (within the bounds)
	// and Options.InitialBytes, for ExpectBatchBytes.
	initial      float64
	initialBytes int64

	mu    sync.Mutex
	limit float64
	// heard is set by the first request's end that Observe takes: the
	// limit is measured from then on. sized is set by ExpectBatchBytes.
	heard, sized bool
	slots        // notified also when the limit moves
	// slowStart grows the limit by one per answer (doubling it each
	// round trip) until the first queue or overload; afterwards it grows
	// by its square root each round trip.
	slowStart bool
	// The current round: it ends with the first answer to a request that
	// started after it began, one round trip later.
	roundStart time.Time
	n          int
	sum        time.Duration
	// nNew and sumNew are the round's round trips on new connections,
	// apart from n and sum (Sample.NewConn).
	nNew   int
	sumNew time.Duration
	peak   int // most slots held at once in the round
	// held is the previous round's peak: the round's answers are of
	// batches that started then.
	held      int
	srtt      time.Duration
	base      time.Duration // least round trip seen, since baseAt
	baseAt    time.Time
	phase     phase
	probeFrom time.Time
	probeMin  time.Duration
	cutAt     time.Time
	cuts      int
	// ceiling is the limit an overload last set (0: none within
	// ceilingMemory); near it the limit grows by one every ceilingStep, not per
	// round trip: a provider that throttles by rate answers 429 to every
	// batch beyond it, however short the round trip.
	ceiling float64
	grownAt time.Time
	// answered are the ends of the answers within rateWindow, for the
	// delivery rate; firstStart is when the first answered request
	// started: before it nothing could be answered, so the rate is not
	// counted over that time.
	answered   []time.Time
	firstStart time.Time
}

// New returns a Controller at o.Initial.
func New(o Options) *Controller {
	if o.Min <= 0 {
		o.Min = DefaultMin
	}
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	o.Max = max(o.Max, o.Min)
	if o.Initial <= 0 {
		o.Initial = DefaultInitial
	}
	if o.InitialBytes <= 0 {
		o.InitialBytes = DefaultInitialBytes
	}
	if o.Floor <= 0 {
		o.Floor = DefaultFloor
	}
	if o.BaseWindow <= 0 {
		o.BaseWindow = DefaultBaseWindow
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	clamp := func(v int) float64 { return float64(min(max(v, o.Min), o.Max)) }
	return &Controller{now: o.Now, min: float64(o.Min), max: float64(o.Max), floor: clamp(o.Floor),
		baseWindow: o.BaseWindow, limit: clamp(o.Initial), initial: clamp(o.Initial), initialBytes: o.InitialBytes,
		slowStart: true, roundStart: o.Now(), slots: newSlots()}
}

// Limit is how many slots may be held now.
func (c *Controller) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.effective()
}

func (c *Controller) effective() int {
	l := c.limit
	if c.phase != steady {
		l = max(c.min, l/2)
	}
	return int(l)
}

// ExpectBatchBytes tells c the size of the batches it is to carry, once
// the run knows it (before its first claim). Until anything is measured
// the limit is then the batches InitialBytes holds, never fewer than
// Initial nor more than initialSpread times it: what fills a link is
// bytes in flight, which is why TCP counts its initial window in bytes,
// and a run of small batches (a provider's low max_batch_tiles) that
// started at Initial would spend round trips doubling up to what large
// batches carry at once. A run of large batches starts at Initial, no
// more batches than a provider that limits its rate of batches sees at
// any start. Once an answer or an overload has come, the limit is
// measured and this changes nothing.
func (c *Controller) ExpectBatchBytes(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.heard {
		return
	}
	c.sized = true
	if n <= 0 {
		return // not known: the limit starts at Initial
	}
	before := c.effective()
	fit := math.Floor(float64(c.initialBytes) / float64(n))
	c.limit = min(max(c.initial, fit), initialSpread*c.initial, c.max)
	if c.effective() != before {
		c.notify()
	}
}

// Ahead is the most slots the limit may allow a round trip from now:
// before the batches' size is known (ExpectBatchBytes), the most the
// first round may hold, initialSpread times Initial; twice the limit in
// slow start, which doubles it in a round trip whose answers all come
// back; afterwards the limit and one round's growth. Whoever opens a
// connection per slot opens this many ahead, so a slot the limit grants
// finds its connection open: the first round's open while the run asks
// the provider its limits, which says how big the batches are.
func (c *Controller) Ahead() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.sized && !c.heard {
		return int(min(initialSpread*c.initial, c.max))
	}
	if c.slowStart && c.phase == steady {
		return int(min(2*c.limit, c.max))
	}
	return int(min(c.limit+max(1, math.Sqrt(c.limit)), c.max))
}

// Acquire waits for a slot; release gives it back. It returns ctx's error
// when ctx ends first, or has ended already (then no slot, not even a free
// one). A slot goes to an AcquireFirst waiting before it.
func (c *Controller) Acquire(ctx context.Context) (release func(), err error) {
	return c.acquire(ctx, false)
}

// AcquireFirst is Acquire ahead of every Acquire waiting: the slot that
// frees next is its. The uploader takes it for a batch back from the
// provider's advised wait and for the resend of an adopted open batch,
// which go before a batch not yet claimed.
func (c *Controller) AcquireFirst(ctx context.Context) (release func(), err error) {
	return c.acquire(ctx, true)
}

func (c *Controller) acquire(ctx context.Context, first bool) (release func(), err error) {
	return c.slots.acquire(ctx, &c.mu, c.effective, first, func() { c.peak = max(c.peak, c.inflight) })
}

// Observe takes one request's end into account.
func (c *Controller) Observe(s Sample) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.heard = true
	if s.Signal != Answered {
		c.cut(now, s)
		return
	}
	c.answered = append(c.answered, now)
	if c.firstStart.IsZero() || s.Start.Before(c.firstStart) {
		c.firstStart = s.Start
	}
	if len(c.answered) > 1024 {
		c.deliveryRate(now)
	}
	rtt := max(s.End.Sub(s.Start), 0)
	if c.base == 0 || rtt <= c.base {
		c.base, c.baseAt = rtt, now
	}
	switch {
	case c.srtt == 0:
		c.srtt = rtt
	case !s.NewConn:
		c.srtt += (rtt - c.srtt) / 8
	}
	if c.phase == measuring && !s.Start.Before(c.probeFrom) && (c.probeMin == 0 || rtt < c.probeMin) {
		c.probeMin = rtt
	}
	if s.NewConn {
		c.nNew++
		c.sumNew += rtt
	} else {
		c.n++
		c.sum += rtt
	}
	before := c.effective()
	if c.slowStart && c.phase == steady && 2*max(c.peak, c.inflight) >= before {
		// Slow start grows by one per answer, as TCP's does per
		// acknowledgement: the limit doubles in a round trip whose
		// batches all came back, and no faster than they do; a provider
		// that refuses some (429) has them not count. It grows while the
		// batches use at least half of it this round, as Linux's TCP
		// does (tcp_is_cwnd_limited): a slot the limit adds is taken a
		// claim later, not at the answer that added it, and a limit that
		// grew only while every slot was held would grow by every other
		// answer, not double; one the batches do not use stops growing.
		c.limit = min(c.limit+1, c.max)
	}
	if s.Start.Before(c.roundStart) {
		if c.effective() != before {
			c.notify()
		}
		return
	}
	c.endRound(now)
	if c.effective() != before {
		c.notify()
	}
}

// Overloaded is Observe of an overload signal that no request carries
// (the breaker opening): a path in trouble, as a timeout says.
func (c *Controller) Overloaded() { c.Observe(Sample{Signal: TimedOut}) }

// cut lowers the limit, once per round trip: the requests in flight
// when the provider first said so say it again, and that is one signal.
// A timeout halves it. A provider that throttles (Overloaded) told what
// it takes: the answers it gave over the last second (over the time since
// the first answered request started, at the run's start), times the
// least round trip, is how many batches in flight that rate needs; the
// limit goes a little under it (underRate, in whole batches), and at
// least one lower. A throttle the pacer answers (Sample.Paced) keeps
// what the rate needs, in whole batches: the pacer already keeps the
// starts under the rate, and a limit under it too would slow the run
// twice. Near the limit a cut set, it grows slowly (grow).
func (c *Controller) cut(now time.Time, s Sample) {
	if !c.cutAt.IsZero() && now.Sub(c.cutAt) < c.srtt {
		return
	}
	before := c.effective()
	c.cutAt, c.cuts = now, c.cuts+1
	next := c.limit * decrease
	if s.Signal == Overloaded {
		carry := c.deliveryRate(now) * c.base.Seconds() // batches in flight the rate takes
		need := math.Floor(underRate * carry)
		if s.Paced {
			need = math.Ceil(carry)
		}
		if need >= 1 {
			next = min(need, c.limit-1)
		}
	}
	c.limit = max(c.min, next)
	c.ceiling = c.limit
	c.slowStart = false
	c.phase = steady
	c.newRound(now)
	if c.effective() != before {
		c.notify()
	}
}

// deliveryRate is the answers per second over the last rateWindow, or,
// when the first answered request started within it (the run's start),
// over the time since then.
func (c *Controller) deliveryRate(now time.Time) float64 {
	i := 0
	for i < len(c.answered) && now.Sub(c.answered[i]) > rateWindow {
		i++
	}
	c.answered = c.answered[i:]
	span := rateWindow
	if since := now.Sub(c.firstStart); !c.firstStart.IsZero() && since < span {
		span = max(since, rateWindow/20)
	}
	return float64(len(c.answered)) / span.Seconds()
}

func (c *Controller) newRound(now time.Time) {
	c.held = c.peak
	c.roundStart, c.n, c.sum, c.nNew, c.sumNew, c.peak = now, 0, 0, 0, 0, c.inflight
}

// endRound decides, once per round trip, from the round's mean round
// trip against the least one: the mean of its round trips on connections
// already open, or of all of them when every one opened its connection
// (a path where no connection is reused).
func (c *Controller) endRound(now time.Time) {
	mean := c.sumNew / time.Duration(max(c.nNew, 1))
	if c.n > 0 {
		mean = c.sum / time.Duration(c.n)
	}
	full := c.peak >= c.effective()
	defer c.newRound(now)
	switch c.phase {
	case draining:
		// The batches started from now on find the queue gone.
		c.phase, c.probeFrom, c.probeMin = measuring, now, 0
		return
	case measuring:
		if c.probeMin > 0 {
			c.base = c.probeMin
		}
		c.baseAt, c.phase = now, steady
		return
	}
	if c.base > 0 && now.Sub(c.baseAt) >= c.baseWindow {
		c.phase = draining
		return
	}
	// The round's round trips are of batches that started in the round
	// before, as many in flight as its peak: after a cut, more than the
	// limit. The queue they found, and what fills the path without one,
	// are counted from that many.
	held := max(c.limit, float64(c.held))
	queue := 0.0
	if c.base > 0 && mean > 0 {
		queue = held * (1 - float64(c.base)/float64(mean))
	}
	alpha, beta := thresholds(c.limit)
	switch {
	case queue < alpha && full:
		c.grow(now)
	case queue > beta:
		// What would fill the path without a queue, plus alpha; never
		// more than half at once, never below the floor by latency alone.
		c.slowStart = false
		target := held*float64(c.base)/float64(mean) + alpha
		c.limit = max(min(c.limit, max(c.limit/2, target)), min(c.floor, c.limit))
	case queue >= alpha:
		c.slowStart = false
	}
	c.limit = min(max(c.limit, c.min), c.max)
}

// grow raises the limit after a round trip with room: by its square root
// after slow start (which grows per answer, in Observe), and by one a
// second near the ceiling an overload left.
func (c *Controller) grow(now time.Time) {
	if c.ceiling > 0 && now.Sub(c.cutAt) >= ceilingMemory {
		c.ceiling = 0
	}
	near := nearCeiling * c.ceiling
	switch {
	case c.slowStart:
		// Grown per answer (Observe).
	case c.ceiling > 0 && c.limit >= near:
		if now.Sub(c.grownAt) < max(ceilingStep, c.srtt) {
			return
		}
		c.limit++
	case c.ceiling > 0:
		c.limit = min(c.limit+max(1, math.Sqrt(c.limit)), max(near, c.limit+1))
	default:
		c.limit += max(1, math.Sqrt(c.limit))
	}
	c.grownAt = now
}

// thresholds are Vegas's alpha and beta: the batches queued at the
// bottleneck below which the limit grows and above which it shrinks. A
// few queued batches keep the link busy between answers; they grow with
// the log of the limit so a large window tolerates more noise.
func thresholds(limit float64) (alpha, beta float64) {
	l := math.Log10(max(limit, 1))
	return max(2, 3*l), max(4, 6*l)
}

// State is what a Controller has measured, for logs and tests.
type State struct {
	Limit    int
	InFlight int
	Base     time.Duration // least round trip
	SRTT     time.Duration // smoothed round trip
	Cuts     int           // overload halvings so far
}

// State reports what c has measured.
func (c *Controller) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return State{Limit: c.effective(), InFlight: c.inflight, Base: c.base, SRTT: c.srtt, Cuts: c.cuts}
}
