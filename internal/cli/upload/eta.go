package upload

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Smoothing of the rate and the ETA. A batch's bytes count when it
// settles, so uploaded bytes arrive in steps: the rate is weighted over
// rateTau of the steps (taken when the totals change, so it does not sag
// between two settlements), and the ETA counts down between them, blended
// into each new estimate over etaTau (or an eighth of the estimate, when
// that is shorter) instead of jumping to it.
const (
	rateTau = 10 * time.Second
	etaTau  = 1500 * time.Millisecond
)

// rateMeter is a rate of bytes per second (the batch bodies put on the
// wire, or, without a count of those, the bytes of settled batches) and
// the ETA from it. It knows no rate before the first bytes are uploaded (unknown,
// not 0). When nothing has settled for much longer than usual (stalled:
// an outage, a long wait), the rate counts the stall in and sinks, and the
// ETA grows instead of counting down. It is safe for concurrent use.
type rateMeter struct {
	mu         sync.Mutex
	now        time.Time // of the last observation
	changed    time.Time // when the totals last changed
	bytes      int64     // the total then
	wBytes, wT float64   // decayed sums of bytes and seconds
	gap        float64   // the usual seconds between changes (weighted)
	changes    int       // how often the total has moved
	// The first change: its total and the seconds from the start to it.
	first      time.Time
	firstBytes int64
	firstDT    float64

	eta   float64 // seconds, the shown estimate; < 0: none yet
	etaAt time.Time
}

func newRateMeter(start time.Time) *rateMeter {
	return &rateMeter{now: start, changed: start, eta: -1}
}

// observe takes the bytes counted so far at now.
func (m *rateMeter) observe(now time.Time, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observeLocked(now, bytes)
}

func (m *rateMeter) observeLocked(now time.Time, bytes int64) {
	if now.After(m.now) {
		m.now = now
	}
	if bytes == m.bytes {
		return
	}
	m.changes++
	dt := max(m.now.Sub(m.changed).Seconds(), 0)
	if m.first.IsZero() {
		// The first settlement ends the run's start-up (capabilities,
		// claims, a batch's round trip): the rate is measured from it on,
		// and until the next one is the plain average since the start.
		m.first, m.firstBytes, m.firstDT = m.now, bytes, dt
		m.changed, m.bytes = m.now, bytes
		return
	}
	f := math.Exp(-dt / rateTau.Seconds())
	m.wBytes = m.wBytes*f + float64(bytes-m.bytes)
	m.wT = m.wT*f + dt
	if m.gap == 0 {
		m.gap = dt
	} else {
		m.gap += (dt - m.gap) / 4
	}
	m.changed, m.bytes = m.now, bytes
}

// stalledLocked: nothing settled for longer than rateTau and three usual
// gaps; since is the time since the totals last changed.
func (m *rateMeter) stalledLocked() (since float64, stalled bool) {
	since = max(m.now.Sub(m.changed).Seconds(), 0)
	return since, since > max(rateTau.Seconds(), 3*m.gap)
}

// rate is bytes per second; ok is false while nothing has been counted.
func (m *rateMeter) rate() (bytesPerSec float64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rateLocked()
}

func (m *rateMeter) rateLocked() (float64, bool) {
	if m.bytes == 0 {
		return 0, false
	}
	wB, wT := m.wBytes, m.wT
	if wT <= 0 { // one change so far
		wB, wT = float64(m.firstBytes), m.firstDT
		if wT <= 0 {
			return 0, false
		}
	}
	if since, stalled := m.stalledLocked(); stalled {
		f := math.Exp(-since / rateTau.Seconds())
		wB, wT = wB*f, wT*f+since
	}
	return wB / wT, true
}

// estimate observes the bytes counted at now and returns the ETA for left
// more and then tail (the time the last of them takes to be answered):
// left at the rate, less the time since the count last moved (the bytes
// kept moving meanwhile), plus tail, blended into the last estimate
// counted down to now (blend). ok is false when the rate or what is left
// is not known.
func (m *rateMeter) estimate(now time.Time, bytes, left int64, tail time.Duration) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observeLocked(now, bytes)
	bps, ok := m.rateLocked()
	if left < 0 || left > 0 && (!ok || bps <= 0) {
		return 0, false
	}
	raw := tail.Seconds()
	if left > 0 {
		rest := float64(left) / bps
		if since, stalled := m.stalledLocked(); !stalled {
			rest = max(rest-since, 0)
		}
		raw += rest
	}
	return m.blendLocked(raw), true
}

// moves is how often the count has moved.
func (m *rateMeter) moves() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changes
}

// blendAt takes raw, a new estimate in seconds made at now (whatever
// rate it is from), and returns the ETA shown: the last one counted down
// to now and moved toward raw over etaTau (at once to 0 when nothing is
// left). It leaves the count as it is.
func (m *rateMeter) blendAt(now time.Time, raw float64) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.After(m.now) {
		m.now = now
	}
	return m.blendLocked(raw)
}

func (m *rateMeter) blendLocked(raw float64) time.Duration {
	switch {
	case raw <= 0:
		m.eta, m.etaAt = 0, m.now
	case m.eta < 0:
		m.eta, m.etaAt = raw, m.now
	default:
		dt := max(m.now.Sub(m.etaAt).Seconds(), 0)
		counted := max(m.eta-dt, 0)
		// Over etaTau, or an eighth of the estimate when that is
		// shorter: a few seconds from the end, a second and a half of
		// smoothing would show the time left long after it is known.
		tau := min(etaTau.Seconds(), raw/8)
		a := 1 - math.Exp(-dt/tau)
		if math.Abs(raw-counted) > raw/4 {
			// Far off (an estimate from the run's first seconds): close
			// half the gap at each look rather than show it for long.
			a = max(a, 0.5)
		}
		m.eta, m.etaAt = counted+a*(raw-counted), m.now
	}
	return time.Duration(m.eta * float64(time.Second))
}

// Delivery rate: the median of the rates between successive looks (its
// steps) over the last slopeWindow of a count that moves smoothly (the
// bytes the peers have acknowledged), leaving out the ramp at the
// window's start: the leading steps each slower than the next by more
// than slopeSpread (the run's first round trips, each carrying more than
// the one before). It is known once the steps after the ramp span
// slopeMinSpan in at least slopeMinSteps, or sooner, once its latest
// slopeStableSteps agree within slopeSpread and span slopeStableSpan:
// on a long fat link the whole run lasts a few seconds, and its rate is
// plain as soon as the ramp ends.
const (
	slopeWindow      = 5 * time.Second
	slopeMinSpan     = time.Second
	slopeMinSteps    = 4
	slopeMinStep     = 100 * time.Millisecond
	slopeStableSteps = 2
	slopeStableSpan  = 400 * time.Millisecond
	slopeSpread      = 0.2
)

// slope is the rate of a count that only grows, over the last
// slopeWindow: the median of the rates between successive looks, so that
// a step (a new connection's buffers filling at once) is not taken for
// the link's rate. Its first look is the first one above 0: the count's
// first step is before it. Once known, it stays known. It is safe for
// concurrent use.
type slope struct {
	mu      sync.Mutex
	samples []slopeSample // oldest first; the first may be older than the window
	known   bool
	// rates is the rate found at each look over the last slopeWindow,
	// oldest first (n in bytes per second), for typical.
	rates []slopeSample
	// bps and ok are the rate of the samples as they are (rate), found
	// when the last one was taken.
	bps float64
	ok  bool
}

type slopeSample struct {
	at time.Time
	n  int64
}

// observe takes the count n at now.
func (s *slope) observe(now time.Time, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		return
	}
	if k := len(s.samples); k > 0 && now.Sub(s.samples[k-1].at) < slopeMinStep {
		return // a second look at the same moment (the rate, then the ETA)
	}
	s.samples = append(s.samples, slopeSample{now, n})
	// Keep one look at or before the window's start, as its anchor.
	cut := 0
	for cut+1 < len(s.samples) && !s.samples[cut+1].at.After(now.Add(-slopeWindow)) {
		cut++
	}
	s.samples = s.samples[cut:]
	s.bps, s.ok = s.rateLocked()
	if s.ok {
		s.rates = append(s.rates, slopeSample{now, int64(s.bps)})
	}
	for len(s.rates) > 0 && s.rates[0].at.Before(now.Add(-slopeWindow)) {
		s.rates = s.rates[1:]
	}
}

// typical is the median of the rates found over the last slopeWindow of
// looks; ok is false while none was known. Toward a run's end fewer
// bytes come to be acknowledged and the rate sinks in its last second or
// two, while those still on their way cross the path at the rate it had
// before.
func (s *slope) typical() (bytesPerSec float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.rates) == 0 {
		return 0, false
	}
	r := make([]float64, len(s.rates))
	for i, x := range s.rates {
		r[i] = float64(x.n)
	}
	return median(r), true
}

// rate is the count's bytes per second over the window, its ramp left
// out, as the last look found it; ok is false until it is known (see
// slopeWindow).
func (s *slope) rate() (bytesPerSec float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bps, s.ok
}

func (s *slope) rateLocked() (float64, bool) {
	if len(s.samples) < 2 {
		return 0, false
	}
	rates := make([]float64, 0, len(s.samples)-1)
	for i := 1; i < len(s.samples); i++ {
		a, b := s.samples[i-1], s.samples[i]
		rates = append(rates, float64(b.n-a.n)/b.at.Sub(a.at).Seconds())
	}
	first := 0 // the first step after the ramp
	for first+1 < len(rates) && rates[first] < (1-slopeSpread)*rates[first+1] {
		first++
	}
	rates = rates[first:]
	span := s.samples[len(s.samples)-1].at.Sub(s.samples[first].at)
	k := len(rates)
	if !s.known {
		spanned := k >= slopeMinSteps && span >= slopeMinSpan
		last := len(s.samples) - 1
		stable := k >= slopeStableSteps && agree(rates[k-slopeStableSteps:]) &&
			s.samples[last].at.Sub(s.samples[last-slopeStableSteps].at) >= slopeStableSpan
		if !spanned && !stable {
			return 0, false
		}
		s.known = true
	}
	return median(rates), true
}

// median is the median of r (not empty), which it sorts.
func median(r []float64) float64 {
	slices.Sort(r)
	k := len(r)
	return (r[(k-1)/2] + r[k/2]) / 2
}

// agree reports whether the rates are within slopeSpread of the fastest.
func agree(rates []float64) bool {
	lo, hi := slices.Min(rates), slices.Max(rates)
	return hi > 0 && lo >= (1-slopeSpread)*hi
}
