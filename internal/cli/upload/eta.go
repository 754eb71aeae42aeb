package upload

import (
	"math"
	"sync"
	"time"
)

// Smoothing of the rate and the ETA. A batch's bytes count when it
// settles, so uploaded bytes arrive in steps: the rate is weighted over
// rateTau of the steps (taken when the totals change, so it does not sag
// between two settlements), and the ETA counts down between them, blended
// into each new estimate over etaTau instead of jumping to it.
const (
	rateTau = 10 * time.Second
	etaTau  = 3 * time.Second
)

// rateMeter is the upload rate (bytes and tiles per second) and the ETA
// from it. It knows no rate before the first bytes are uploaded (unknown,
// not 0). When nothing has settled for much longer than usual (stalled:
// an outage, a long wait), the rate counts the stall in and sinks, and the
// ETA grows instead of counting down. It is safe for concurrent use.
type rateMeter struct {
	mu                 sync.Mutex
	now                time.Time // of the last observation
	changed            time.Time // when the totals last changed
	bytes, tiles       int64     // the totals then
	wBytes, wTiles, wT float64   // decayed sums of bytes, tiles and seconds
	gap                float64   // the usual seconds between changes (weighted)

	eta   float64 // seconds, the shown estimate; < 0: none yet
	etaAt time.Time
}

func newRateMeter(start time.Time) *rateMeter {
	return &rateMeter{now: start, changed: start, eta: -1}
}

// observe takes the run's totals uploaded so far at now.
func (m *rateMeter) observe(now time.Time, bytes, tiles int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observeLocked(now, bytes, tiles)
}

func (m *rateMeter) observeLocked(now time.Time, bytes, tiles int64) {
	if now.After(m.now) {
		m.now = now
	}
	if bytes == m.bytes && tiles == m.tiles {
		return
	}
	dt := max(m.now.Sub(m.changed).Seconds(), 0)
	f := math.Exp(-dt / rateTau.Seconds())
	m.wBytes = m.wBytes*f + float64(bytes-m.bytes)
	m.wTiles = m.wTiles*f + float64(tiles-m.tiles)
	m.wT = m.wT*f + dt
	if m.gap == 0 {
		m.gap = dt
	} else {
		m.gap += (dt - m.gap) / 4
	}
	m.changed, m.bytes, m.tiles = m.now, bytes, tiles
}

// stalledLocked: nothing settled for longer than rateTau and three usual
// gaps; since is the time since the totals last changed.
func (m *rateMeter) stalledLocked() (since float64, stalled bool) {
	since = max(m.now.Sub(m.changed).Seconds(), 0)
	return since, since > max(rateTau.Seconds(), 3*m.gap)
}

// rate is bytes and tiles per second; ok is false while nothing has been
// uploaded.
func (m *rateMeter) rate() (bytesPerSec, tilesPerSec float64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rateLocked()
}

func (m *rateMeter) rateLocked() (float64, float64, bool) {
	if m.bytes == 0 || m.wT <= 0 {
		return 0, 0, false
	}
	wB, wTi, wT := m.wBytes, m.wTiles, m.wT
	if since, stalled := m.stalledLocked(); stalled {
		f := math.Exp(-since / rateTau.Seconds())
		wB, wTi, wT = wB*f, wTi*f, wT*f+since
	}
	return wB / wT, wTi / wT, true
}

// estimate observes the totals at now and returns the ETA for what is left
// (bytes and tiles): the mean of the time the bytes and the tiles take at
// their rates (a link bound by bandwidth and one bound by per-batch costs
// are both seen), less the time since the last settlement (the bytes kept
// moving meanwhile), blended into the last estimate counted down to now.
// ok is false when the rate or what is left is not known.
func (m *rateMeter) estimate(now time.Time, bytes, tiles, leftBytes, leftTiles int64) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observeLocked(now, bytes, tiles)
	bps, tps, ok := m.rateLocked()
	if !ok || leftBytes < 0 || leftTiles < 0 {
		return 0, false
	}
	if leftBytes == 0 && leftTiles == 0 {
		m.eta, m.etaAt = 0, m.now
		return 0, true
	}
	if bps <= 0 || tps <= 0 {
		return 0, false
	}
	raw := (float64(leftBytes)/bps + float64(leftTiles)/tps) / 2
	if since, stalled := m.stalledLocked(); !stalled {
		raw = max(raw-since, 0)
	}
	if m.eta < 0 {
		m.eta, m.etaAt = raw, m.now
	} else {
		dt := max(m.now.Sub(m.etaAt).Seconds(), 0)
		counted := max(m.eta-dt, 0)
		a := 1 - math.Exp(-dt/etaTau.Seconds())
		m.eta, m.etaAt = counted+a*(raw-counted), m.now
	}
	return time.Duration(m.eta * float64(time.Second)), true
}
