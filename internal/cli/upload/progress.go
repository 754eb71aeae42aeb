package upload

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/bwlimit"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/metricsfile"
	"github.com/tilectl/tilectl/internal/sockmeter"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// redrawEvery is how often the status line is redrawn on a terminal
// (often enough for a countdown in seconds to tick smoothly); off one,
// progress is logged every upload.progress_interval.
const redrawEvery = 250 * time.Millisecond

// progress follows one flight's upload: a status line on a terminal (tile
// count, bar, bytes, rate and the state, such as "retrying in 4s (37
// pending, 12 rejected)"), periodic INFO lines otherwise, nothing with
// --quiet. Its methods are safe for concurrent use (batches settle on
// several goroutines).
type progress struct {
	flightID string
	total    atomic.Pointer[totals] // nil until the flight's pending tiles are counted
	metrics  *metricsfile.Metrics
	now      func() time.Time
	started  time.Time
	// meter is the rate of body bytes handed to the connections, or of
	// settled bytes, where the sockets cannot tell what is acknowledged;
	// and the ETA's smoothing, whatever its rate (measure decides which).
	meter *rateMeter
	// deliveredRate is the rate of bytes acknowledged, where the sockets
	// tell.
	deliveredRate slope
	// crossed is the rate the bodies cross the path at, by their
	// answers, where the sockets tell.
	crossed crossing
	// limiter is the run's bandwidth limit, shown while one is set.
	limiter atomic.Pointer[bwlimit.Limiter]
	// wire counts the body bytes sent, for the rate and the ETA; nil:
	// they follow settled batches.
	wire atomic.Pointer[wireCount]
	// lastSettled is when a batch last settled with tiles uploaded.
	lastSettled atomic.Pointer[time.Time]

	tiles, retries, giveups, rejections atomic.Int64
	bytes                               atomic.Int64
	// delivered is the bodies of the settled batches, framing included,
	// whatever became of their tiles: a rejected tile was delivered as
	// much as an uploaded one.
	delivered atomic.Int64
	// settleMu is held (written) while a batch moves from the sockets'
	// count in flight to delivered, and (read) while the ETA reads both,
	// so that it never sees the batch in neither or in both.
	settleMu sync.RWMutex
	// toSend is the bodies the run sends in all, framing included, once a
	// retry said what the flight has pending (those settled by then
	// counted in): a retry sends the rejected tiles again. nil: the
	// flight's total.
	toSend atomic.Pointer[int64]
	// deferred is the tiles left waiting past the run's deadline for the
	// provider's advised time: this run does not send them.
	deferred atomic.Int64

	mu      sync.Mutex
	state   string        // "" while uploading
	until   time.Time     // a countdown's end, shown in the state
	dynamic func() string // a state computed at each redraw
	// settling is "settling N open batches" while an earlier run's open
	// batches settle; a retry's countdown or an outage shows over it.
	settling string
	// interrupt, once a signal came, shows over every other state.
	interrupt atomic.Pointer[interruptState]
	// waitingFor is "waiting for N tiles held by run ..." while the run
	// waits for other runs' batches (uploader.Held); "" otherwise.
	waitingFor string
	// allDelivered is when every body byte was first seen acknowledged.
	allDelivered time.Time
	// tailRate is the typical rate of bytes acknowledged over the last
	// few seconds then (0: not known): the rate the bytes still on their
	// way cross the path at, once the count stops moving and its own rate
	// sinks.
	tailRate float64

	status *iostreams.StatusLine // nil off a terminal
	log    zerolog.Logger
	quiet  bool
	stop   func()
	done   chan struct{}
	wg     sync.WaitGroup
}

// totals is what the flight had pending when the run started.
type totals struct {
	tiles int
	bytes int64
}

// setTotal shows the flight's pending tiles and bytes once they are known:
// the count runs beside the upload, so the first batch does not wait for it.
func (p *progress) setTotal(tiles int, bytes int64) {
	p.total.Store(&totals{tiles: tiles, bytes: bytes})
}

// newProgress starts the display; tiles < 0 means the total is not known
// yet (setTotal gives it). Off a terminal, progress is logged every every.
func newProgress(flightID string, tiles int, bytes int64, status *iostreams.StatusLine, quiet bool, log zerolog.Logger,
	ticker func(time.Duration) (<-chan time.Time, func()), every time.Duration, m *metricsfile.Metrics, now func() time.Time) *progress {
	p := &progress{flightID: flightID, metrics: m, log: log, quiet: quiet,
		status: status, now: now, started: now(), done: make(chan struct{}), stop: func() {}}
	p.meter = newRateMeter(p.started)
	if tiles >= 0 {
		p.setTotal(tiles, bytes)
	}
	if quiet {
		return p
	}
	var c, look <-chan time.Time
	if status != nil {
		t := time.NewTicker(redrawEvery)
		c, p.stop = t.C, t.Stop
		p.redraw()
	} else {
		c, p.stop = ticker(every)
		// The acknowledged bytes are looked at as often as a terminal's
		// line is redrawn, whatever the log's interval, so that their
		// rate is known as soon.
		lt := time.NewTicker(redrawEvery)
		stopLog := p.stop
		look, p.stop = lt.C, func() { stopLog(); lt.Stop() }
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.done:
				return
			case <-look:
				p.lookDelivered()
			case <-c:
				if p.status != nil {
					p.redraw()
				} else {
					p.logLine()
				}
			}
		}
	}()
	return p
}

// line is the status line's text, every field shown.
func (p *progress) line() string { return iostreams.Fit(p.fields(), 1<<20) }

// Status line priorities (0 is kept longest on a narrow terminal): what
// the run is doing and when it will be done, then how far it is, the rate,
// the limit, the bar, the bytes, and last the flight ID (shortened first).
const (
	prioState = iota
	prioTiles
	prioRate
	prioLimit
	prioIdle // the state when it is only "uploading"
	prioBar
	prioBytes
	prioFlight
)

// fields is the status line: flight, bar, tiles, bytes, rate, limit, state
// and ETA, each with its priority.
func (p *progress) fields() []iostreams.Field {
	done, tot := p.tiles.Load(), p.total.Load()
	total, totalTiles, totalBytes := int64(0), "?", "?"
	if tot != nil {
		total, totalTiles, totalBytes = int64(tot.tiles), fmt.Sprint(tot.tiles), iostreams.HumanBytes(tot.bytes)
	}
	const width = 20
	filled := 0
	if total > 0 {
		filled = int(min(done, total) * width / total)
	}
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	if filled > 0 && filled < width {
		bar = strings.Repeat("=", filled-1) + ">" + strings.Repeat(" ", width-filled)
	}
	look, eta, etaOK := p.glance()
	rate := "-/s"
	if look.rateOK {
		rate = iostreams.HumanBytes(int64(look.bps)) + "/s"
	}
	state, statePrio := p.stateText(), prioState
	if state == "uploading" {
		statePrio = prioIdle
	}
	f := []iostreams.Field{
		{Text: p.flightID, Short: shortID(p.flightID), Priority: prioFlight},
		{Text: "[" + bar + "]", Priority: prioBar},
		{Text: fmt.Sprintf("%d/%s tiles", done, totalTiles), Priority: prioTiles},
		{Text: iostreams.HumanBytes(p.bytes.Load()) + "/" + totalBytes, Priority: prioBytes},
		{Text: rate, Priority: prioRate},
	}
	if l := p.limiter.Load(); l.Configured() {
		f = append(f, iostreams.Field{Text: "limit " + l.Current().String(), Priority: prioLimit})
	}
	f = append(f, iostreams.Field{Text: state, Priority: statePrio})
	if etaOK {
		f = append(f, iostreams.Field{Text: "ETA " + iostreams.HumanDuration(eta.Round(time.Second)), Priority: prioState})
	}
	return f
}

// shortID is a long flight ID cut to its first 8 characters and an
// ellipsis; "" (nothing shorter to show) for a short one.
func shortID(id string) string {
	r := []rune(id)
	if len(r) <= 10 {
		return ""
	}
	return string(r[:8]) + "…"
}

// wireOverheadPerTile estimates the bytes a tile adds to a batch body
// beyond its own: its part's header and its manifest entry.
const wireOverheadPerTile = 384

// wireCount is where the flight's body bytes on the wire are counted: the
// run's counter, and its value when the flight started.
type wireCount struct {
	c       *sentCounter
	base    int64
	started time.Time // when the flight started
	sockets sockets   // nil: what is acknowledged is not known
	// ackedBase is what the sockets had acknowledged when the flight
	// started.
	ackedBase int64
}

// sockets is what the rate and the ETA ask of the uploader's connections
// and requests (sockmeter.Meter).
type sockets interface {
	// Acked is the bytes the provider's side has acknowledged on every
	// connection, closed ones included: it only grows, resends and all;
	// ok is false when the platform cannot tell.
	Acked() (bytes int64, ok bool)
	// InFlight is the body bytes of the requests not answered yet that
	// the provider's side has acknowledged, and of the batches answered
	// and not settled yet (Settled); ok as Acked's.
	InFlight() (bytes int64, ok bool)
	// Settled drops the answered batch with the operation ID key from
	// InFlight: it counts among the settled batches from now on.
	Settled(key string)
	// SettledAll drops every answered batch from InFlight: the uploader's
	// call ended, and what it did not settle it will not.
	SettledAll()
	// AnswerLag is the time from a request's last byte acknowledged to
	// its answer; ok is false until one was measured.
	AnswerLag() (time.Duration, bool)
	// Answers is the latest batches' answers (up to 1,024: a few seconds'
	// worth on a fast link), each
	// with when it came and what Acked was when its body was all
	// acknowledged, oldest first.
	Answers() []sockmeter.Answer
}

// countWire has the rate and the ETA follow the body bytes c lets through
// from now on, instead of the bytes of settled batches.
func (p *progress) countWire(c *sentCounter, s sockets) {
	w := &wireCount{c: c, base: c.sent(), sockets: s, started: p.now()}
	if s != nil {
		w.ackedBase, _ = s.Acked()
	}
	p.wire.Store(w)
}

// rateSource is the count a rate is of.
type rateSource int

const (
	// rateAcked: the bytes the provider's side has acknowledged (where the
	// sockets tell), which move as smoothly as the link takes them: the
	// median of the rates between looks (slope).
	rateAcked rateSource = iota
	// rateSent: the body bytes handed to the connections (what --bwlimit
	// caps), which move in steps as buffers fill: weighted over the steps
	// (rateMeter).
	rateSent
	// rateSettled: the bytes of settled batches, without a count of the
	// bodies: weighted over the steps as well.
	rateSettled
)

// measure is the one rate of the flight: the status line and the log
// show it and the ETA divides by it. It is of the bytes acknowledged
// where the sockets tell; otherwise of those put on the wire, trusted once
// the count has moved a few times after the run's first bodies filled
// the connections' buffers; without a count of those, of settled batches.
// ok is false while it is not known.
func (p *progress) measure(now time.Time) (bps float64, src rateSource, ok bool) {
	w := p.wire.Load()
	if w == nil {
		p.meter.observe(now, p.bytes.Load())
		bps, ok = p.meter.rate()
		return bps, rateSettled, ok
	}
	if acked, ok := p.acked(w); ok {
		p.deliveredRate.observe(now, acked)
		p.crossed.observe(now, p.answers(w))
		bps, ok := p.deliveredRate.rate()
		return bps, rateAcked, ok
	}
	p.meter.observe(now, w.c.sent()-w.base)
	if p.meter.moves() < trustedMoves {
		return 0, rateSent, false
	}
	bps, ok = p.meter.rate()
	return bps, rateSent, ok
}

// rate is measure's rate in bytes per second now.
func (p *progress) rate() (float64, bool) {
	bps, _, ok := p.measure(p.now())
	return bps, ok
}

// lookDelivered takes the count the rate is of into it (measure): off a
// terminal it is looked at as often as a terminal's line is redrawn.
func (p *progress) lookDelivered() { p.measure(p.now()) }

// answers is the flight's batches' answers, oldest first: those that
// came before it started are another flight's.
func (p *progress) answers(w *wireCount) []sockmeter.Answer {
	return slices.DeleteFunc(w.sockets.Answers(), func(a sockmeter.Answer) bool {
		return a.At.Before(w.started)
	})
}

// acked is the bytes the provider's side has acknowledged since the
// flight started, counted from its first body on: 0 until a body was
// handed over, so that the rate's looks do not start with the run's
// small requests (capabilities, claims), far slower than its batches.
// ok is false where the sockets cannot tell.
func (p *progress) acked(w *wireCount) (int64, bool) {
	if w.sockets == nil {
		return 0, false
	}
	n, ok := w.sockets.Acked()
	if !ok {
		return 0, false
	}
	if w.c.sent() == w.base {
		return 0, true
	}
	return max(n-w.ackedBase, 0), true
}

// eta is the smoothed time left for the flight's pending tiles; ok is
// false while the total or the rate is not known.
//
// Where the sockets tell what the provider's side has acknowledged, it is
// when what is still to deliver will have crossed the path at the rate
// the bytes are acknowledged, behind what is on its way, and the last
// answer come back (deliveredETA): told by the latest batches' answers,
// or before one came, what is still to deliver at the rate plus the
// answer lag (sockmeter: before a batch's, a small request's). What is
// still to deliver is the flight's bodies (its bytes, and a part header
// and manifest entry per tile) less the settled batches' (whole,
// rejected tiles and all: they were delivered) and what the provider's
// side has acknowledged of the bodies still waiting for their answer (or
// answered and not settled yet: the sockets hold those until batch takes
// them over): a body sent again counts from nothing again, and one whose
// request failed counts whole, so resends do not shorten it. Tiles left
// waiting past the deadline for the provider's advice are not sent in
// the run and leave the flight's bodies; a retry sends what the flight
// has pending again, its rejected tiles among it, and what is still to
// deliver is then that (wholeToSend). Both are measured, not guessed;
// until a request was answered and the rate is known, there is no ETA.
//
// Otherwise, with the body bytes counted, what is left is the flight's
// bodies less those of settled batches and half of what is in flight:
// bodies handed over and not settled have, on the whole, half arrived
// (none just after their batch started, all just before it settles).
// Where buffers are shallow (a bandwidth limit paces the bodies) that is
// nearly exact; behind a deep buffer before a slow link it is as good as
// the guess of a half.
//
// Without the count, it is the bytes not yet settled at the rate of
// settled ones.
func (p *progress) eta() (time.Duration, bool) {
	_, eta, ok := p.glance()
	return eta, ok
}

// rateLook is the rate one look found, for a line that shows both it and
// the ETA (the status line, the log's progress line): the sockets are
// read once per line.
type rateLook struct {
	bps    float64
	rateOK bool
}

// glance measures once and returns the rate and the ETA from that look.
func (p *progress) glance() (rateLook, time.Duration, bool) {
	now := p.now()
	bps, src, ok := p.measure(now)
	eta, etaOK := p.etaFrom(now, bps, src, ok)
	return rateLook{bps: bps, rateOK: ok}, eta, etaOK
}

// etaFrom is the ETA at now from the rate measure found then.
func (p *progress) etaFrom(now time.Time, bps float64, src rateSource, ok bool) (time.Duration, bool) {
	tot := p.total.Load()
	if tot == nil {
		return 0, false
	}
	if src == rateSettled {
		return p.meter.estimate(now, p.bytes.Load(), max(tot.bytes-p.bytes.Load(), 0), 0)
	}
	if int64(tot.tiles)-p.tiles.Load() <= 0 {
		return p.meter.blendAt(now, 0), true
	}
	w := p.wire.Load()
	whole := tot.bytes + int64(tot.tiles)*wireOverheadPerTile
	settled := p.bytes.Load() + p.tiles.Load()*wireOverheadPerTile
	if src == rateAcked {
		return p.deliveredETA(now, bps, ok, p.wholeToSend(tot), w)
	}
	if !ok || bps <= 0 {
		return 0, false
	}
	last := p.lastSettled.Load()
	if last == nil {
		return 0, false
	}
	inFlight := max(w.c.sent()-w.base-settled, 0)
	// Settled bytes move in steps: half of what is left counts down
	// between two settlements.
	est := float64(max(whole-settled, 0))/bps - float64(inFlight)/2/bps - now.Sub(*last).Seconds()/2
	return p.meter.blendAt(now, max(est, 0)), true
}

// wholeToSend is the bodies the run sends in all, framing included: the
// flight's, or since a retry, what the settled batches delivered and
// what the flight had pending then; less the tiles left waiting past the
// deadline (at the flight's mean tile size: the wait names no bytes).
func (p *progress) wholeToSend(tot *totals) int64 {
	whole := tot.bytes + int64(tot.tiles)*wireOverheadPerTile
	if n := p.toSend.Load(); n != nil {
		whole = *n
	}
	if tot.tiles > 0 {
		whole -= p.deferred.Load() * (tot.bytes/int64(tot.tiles) + wireOverheadPerTile)
	}
	return max(whole, 0)
}

// deliveredETA is eta from the bytes acknowledged, at bps (known: ok):
// the run ends when what is still to deliver of whole has crossed the
// path behind what is on its way, and the last answer has come back.
// Each of the latest endAnswers batches' answers in the flight tells
// that end: every byte acknowledged after its body, and every byte still
// to deliver, crosses the path after it, so the end is at the answer
// plus those bytes at the rate the bodies cross the path at, by their
// answers (crossed: behind a queue that fills, the count acknowledged
// runs ahead of the path); until that is known, at the typical rate of
// the acknowledged bytes over the last few seconds (slope.typical: the
// rate of the moment sinks in the run's last seconds, while what is on
// its way still crosses at the path's; once all is acknowledged, the
// typical rate then, tailRate); the median of theirs is the end
// (answerEnd). That counts in what an answer lag does not: behind a
// deep queue, the last batches' answers come sooner after their bytes
// were acknowledged than the earlier ones' did, as the queue, no longer
// kept full, drains. It is never less than what is still to deliver at
// bps; with bytes still to deliver, it is unknown while bps is 0 (a
// stall) or neither rate is known.
//
// Before a batch of the flight was answered (or where no look saw a body
// all acknowledged before its answer), it is what is still to deliver at
// bps, plus the answer lag; once all is acknowledged, the lag counts
// down from then.
func (p *progress) deliveredETA(now time.Time, bps float64, ok bool, whole int64, w *wireCount) (time.Duration, bool) {
	lag, lagOK := w.sockets.AnswerLag()
	answers := p.answers(w)
	answers = answers[max(len(answers)-endAnswers, 0):]
	acked, _ := w.sockets.Acked()
	p.settleMu.RLock()
	settled := p.delivered.Load()
	inFlight, flightOK := w.sockets.InFlight()
	p.settleMu.RUnlock()
	if !lagOK || !flightOK {
		return 0, false
	}
	left := max(whole-settled-inFlight, 0)
	allAcked := left <= whole/200 // all of it, but for the estimate of the framing
	p.mu.Lock()
	switch {
	case !allAcked:
		p.allDelivered, p.tailRate = time.Time{}, 0 // a resend: more to deliver again
	case p.allDelivered.IsZero():
		p.allDelivered = now
		p.tailRate, _ = p.deliveredRate.typical()
	}
	since, tailRate := now.Sub(p.allDelivered), p.tailRate
	p.mu.Unlock()
	rate, _ := p.deliveredRate.typical()
	if allAcked {
		rate = tailRate
	}
	crossed, crossedOK := p.crossed.rate()
	if crossedOK {
		rate = crossed
	}
	rateOK := rate > 0
	if !allAcked && (ok && bps <= 0 || !ok && !crossedOK) {
		// Nothing moves now (a stall) or no rate is known: the answers'
		// ends would count down to a moment that has nothing to do with
		// when what is left will move again.
		return 0, false
	}
	if len(answers) > 0 && rateOK {
		raw := answerEnd(now, answers, acked, left, rate)
		if ok && bps > 0 {
			raw = max(raw, float64(left)/bps)
		}
		return p.meter.blendAt(now, max(raw, 0)), true
	}
	if allAcked {
		return p.meter.blendAt(now, max(lag.Seconds()-since.Seconds(), 0)), true
	}
	if !ok || bps <= 0 {
		return 0, false
	}
	return p.meter.blendAt(now, float64(left)/bps+lag.Seconds()), true
}

// answerEnd is how many seconds after now the run ends by answers (at
// least one): for each, its time plus the bytes acknowledged since its
// body was (acked is the count now) and the left still to deliver, at
// bps; the median of them.
func answerEnd(now time.Time, answers []sockmeter.Answer, acked, left int64, bps float64) float64 {
	ends := make([]float64, 0, len(answers))
	for _, a := range answers {
		ends = append(ends, a.At.Sub(now).Seconds()+float64(max(acked-a.Acked, 0)+left)/bps)
	}
	return median(ends)
}

// endAnswers is how many of the latest answers tell the run's end
// (answerEnd): the median of theirs.
const endAnswers = 4

// trustedMoves is how often the count of body bytes must have moved
// before its rate makes an ETA: its first moves fill the connections'
// buffers at once and then wait for the link.
const trustedMoves = 3

func (p *progress) stateText() string {
	if st := p.interrupt.Load(); st != nil {
		return st.text()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.dynamic != nil:
		return p.dynamic()
	case p.state == "" && p.settling != "":
		return p.settling
	case p.state == "" && p.waitingFor != "":
		return p.waitingFor
	case p.state == "":
		return "uploading"
	case p.until.IsZero():
		return p.state
	}
	left := max(p.until.Sub(p.now()), 0).Round(time.Second)
	return fmt.Sprintf(p.state, left)
}

// setState shows format (with %s for the countdown to until, when until is
// not zero); "" is "uploading".
func (p *progress) setState(format string, until time.Time) {
	p.mu.Lock()
	p.state, p.until, p.dynamic = format, until, nil
	p.mu.Unlock()
	p.redraw()
}

func (p *progress) redraw() {
	if p.status != nil && !p.quiet {
		p.status.SetFields(p.fields())
	}
}

func (p *progress) logLine() {
	e := p.log.Info().Str("flight_id", p.flightID)
	if tot := p.total.Load(); tot != nil {
		e = e.Int64("tiles_done", p.tiles.Load()).Int("tiles_total", tot.tiles).
			Int64("bytes_done", p.bytes.Load()).Int64("bytes_total", tot.bytes)
	} else { // not counted yet: null, not 0
		e = e.Int64("tiles_done", p.tiles.Load()).RawJSON("tiles_total", []byte("null")).
			Int64("bytes_done", p.bytes.Load()).RawJSON("bytes_total", []byte("null"))
	}
	// Unknown is null, never a 0 made up.
	look, eta, etaOK := p.glance()
	if look.rateOK {
		e = e.Float64("rate_bytes_per_second", math.Round(look.bps))
	} else {
		e = e.RawJSON("rate_bytes_per_second", []byte("null"))
	}
	if etaOK {
		e = e.Float64("eta_seconds", math.Round(eta.Seconds()*10)/10)
	} else {
		e = e.RawJSON("eta_seconds", []byte("null"))
	}
	if l := p.limiter.Load(); l.Configured() {
		e = e.Str("bwlimit", l.Current().String())
	}
	e.Int64("retries", p.retries.Load()).Int64("given_up", p.giveups.Load()).
		Str("state", p.stateText()).
		Msg("upload progress")
}

// batch is the uploader's Request.Progress. Only uploaded tiles advance the
// count, so a retried tile is counted once, when it finally goes through.
func (p *progress) batch(b uploader.BatchProgress) {
	if b.Latency > 0 {
		p.metrics.ObserveBatch(b.Latency)
	}
	p.rejections.Add(int64(b.Rejected))
	p.settleMu.Lock()
	p.delivered.Add(b.Bytes + int64(b.Tiles)*wireOverheadPerTile)
	if w := p.wire.Load(); w != nil && w.sockets != nil {
		w.sockets.Settled(b.OpID)
	}
	p.settleMu.Unlock()
	if st := p.interrupt.Load(); st != nil {
		st.settled()
		p.redraw()
	}
	if b.Uploaded == 0 {
		return
	}
	p.tiles.Add(int64(b.Uploaded))
	var done int64
	if b.Tiles > 0 {
		done = b.Bytes * int64(b.Uploaded) / int64(b.Tiles)
	}
	p.bytes.Add(done)
	now := p.now()
	p.lastSettled.Store(&now)
	p.mu.Lock()
	if p.until.IsZero() || !p.now().Before(p.until) {
		p.state, p.until = "", time.Time{} // a batch settled: sending again
	}
	p.mu.Unlock()
}

func (p *progress) hooks() retrydecorator.Hooks {
	return retrydecorator.Hooks{
		OnRetry: func(e retrydecorator.RetryEvent) {
			p.retries.Add(1)
			// The call ended: nothing is in flight, and what the flight
			// has pending (the rejected tiles among it) is sent again.
			p.settleMu.Lock()
			if w := p.wire.Load(); w != nil && w.sockets != nil {
				w.sockets.SettledAll()
			}
			toSend := p.delivered.Load() + e.PendingBytes + int64(e.Pending)*wireOverheadPerTile
			p.toSend.Store(&toSend)
			p.settleMu.Unlock()
			p.setState(fmt.Sprintf("retrying in %%s (%d pending, %d rejected)", e.Pending, e.Rejected), p.now().Add(e.Sleep))
		},
		OnGiveUp: func(tilestore.GiveUp) {
			p.giveups.Add(1)
		},
	}
}

// settle is the uploader's Request.Settling: "settling N open batches"
// as the state until they are settled (a retry's countdown or an outage
// shows over it meanwhile), drawn in place on a terminal; off one, a log
// line at the start and at the end as well.
func (p *progress) settle(e uploader.SettlingProgress) {
	if p.quiet {
		return
	}
	text := ""
	if !e.Done {
		text = "settling " + iostreams.Count(e.Open, "open batch", "open batches")
		if e.Open == 1 {
			text = "settling 1 open batch"
		}
	}
	p.mu.Lock()
	p.settling = text
	p.mu.Unlock()
	if p.status != nil {
		p.redraw()
		return
	}
	msg := "settling the batches an earlier run left open"
	if e.Done {
		msg = "settled the batches an earlier run left open"
	}
	p.log.Info().Str("flight_id", p.flightID).Int("open_batches", e.Open).Msg(msg)
}

// interrupting shows st, what the interrupted run waits for, from now on.
func (p *progress) interrupting(st *interruptState) {
	p.interrupt.Store(st)
	p.redraw()
}

// wait is the uploader's Request.Waiting: a wait the provider advised, as
// the state, saying what waits and until when (with a countdown when the
// run waits for it). The uploader logs the same.
func (p *progress) wait(w uploader.Wait) {
	if w.PastDeadline {
		p.deferred.Add(int64(w.Tiles))
	}
	if p.quiet {
		return
	}
	until := w.Until.Local().Format("15:04:05")
	if w.PastDeadline {
		p.setState(fmt.Sprintf("%d tiles wait until %s as the provider advised (after this run's deadline)", w.Tiles, until), time.Time{})
		return
	}
	p.setState(fmt.Sprintf("waiting %%s for %d tiles until %s as the provider advised", w.Tiles, until), w.Until)
}

// holding is the uploader's Request.Holding: the status line shows whose
// batches the run waits for and until when; the uploader logs the start
// of the wait itself.
func (p *progress) holding(b uploader.Held) {
	text := ""
	if b.Tiles > 0 {
		text = "waiting for " + b.String()
	}
	p.mu.Lock()
	p.waitingFor = text
	p.mu.Unlock()
	p.redraw()
}

// breaker renders the circuit breaker's state changes.
func (p *progress) breaker(e uploader.BreakerEvent) {
	switch e.State {
	case uploader.BreakerOpen:
		since := e.Since
		p.mu.Lock()
		p.dynamic = func() string {
			return fmt.Sprintf("provider unavailable for %s, retrying", max(p.now().Sub(since), 0).Round(time.Second))
		}
		p.mu.Unlock()
		p.redraw()
	case uploader.BreakerClosed:
		p.setState("", time.Time{})
	}
}

// finish stops the display and erases the status line, so the summary
// that follows starts on a line of its own.
func (p *progress) finish() {
	close(p.done)
	p.stop()
	p.wg.Wait()
	// The flight's calls ended: an answered batch they did not settle
	// (its resends spent, say) is not the next flight's in flight.
	if w := p.wire.Load(); w != nil && w.sockets != nil {
		w.sockets.SettledAll()
	}
	if p.status != nil {
		p.status.Clear()
	}
}
