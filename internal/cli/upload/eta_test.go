package upload

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/bwlimit"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/metricsfile"
	"github.com/tilectl/tilectl/internal/sockmeter"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/uploader"
)

func TestTheRateIsUnknownUntilBytesAreUploaded(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	m := newRateMeter(start)
	m.observe(start.Add(3*time.Second), 0)
	if _, ok := m.rate(); ok {
		t.Fatal("a rate is known before any byte was uploaded")
	}
	if _, ok := m.estimate(start.Add(4*time.Second), 0, 1000, 0); ok {
		t.Fatal("an ETA is known before any byte was uploaded")
	}
	m.observe(start.Add(5*time.Second), 5000)
	if bps, ok := m.rate(); !ok || math.Abs(bps-1000) > 1 {
		t.Fatalf("rate %v (known %v) after 5000 bytes in 5 s, want 1000 B/s", bps, ok)
	}
}

// A link that moves 1 MiB/s while batches of 4 MiB settle together every
// 4 s: from a quarter done on, the ETA shown each 250 ms stays within 20% of
// the real time left and never jumps by more than a tenth of itself between
// two looks (beyond the 250 ms that passed).
func TestTheETAFollowsBurstySettlementsWithoutJumping(t *testing.T) {
	t.Parallel()
	const total, batch = 120 << 20, 4 << 20
	start := time.Unix(1_700_000_000, 0)
	m := newRateMeter(start)
	const step = 250 * time.Millisecond
	var done int64
	prev := time.Duration(-1)
	for i := 1; done < total; i++ {
		now := start.Add(time.Duration(i) * step)
		if i%16 == 0 { // every 4 s, 4 s of bytes settle at once
			done += batch
		}
		eta, ok := m.estimate(now, done, total-done, 0)
		if done == 0 {
			continue
		}
		if !ok {
			t.Fatalf("no ETA at %s with %d bytes done", now.Sub(start), done)
		}
		if done*4 >= total && done < total {
			real := start.Add(total / batch * 4 * time.Second).Sub(now) // the last batch settles then
			if math.Abs(eta.Seconds()/real.Seconds()-1) > 0.2 {
				t.Errorf("at %s (%d%% done) ETA %s, real %s: off by more than 20%%", now.Sub(start), done*100/total, eta, real)
			}
			if prev >= 0 && math.Abs((eta-prev+step).Seconds()) > 0.1*prev.Seconds() {
				t.Errorf("at %s the ETA jumped from %s to %s", now.Sub(start), prev, eta)
			}
		}
		prev = eta
	}
}

func TestAStallMakesTheETAGrowInsteadOfCountingDown(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	m := newRateMeter(start)
	for i := 1; i <= 20; i++ { // 1 MB/s, a settlement a second
		m.estimate(start.Add(time.Duration(i)*time.Second), int64(i)*1e6, 100e6-int64(i)*1e6, 0)
	}
	before, _ := m.estimate(start.Add(20*time.Second), 20e6, 80e6, 0)
	after, ok := m.estimate(start.Add(80*time.Second), 20e6, 80e6, 0) // a minute with nothing settled
	if !ok || after <= before {
		t.Fatalf("after a minute's stall the ETA is %s (known %v), before it %s: want it to grow", after, ok, before)
	}
}

// The status line shows the limit in force while one is set: the rate,
// "limit off" once SIGUSR2 toggled it off, the rate again once back on.
func TestTheStatusLineShowsTheLimitInForce(t *testing.T) {
	t.Parallel()
	var errOut bytes.Buffer
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	p := newProgress("F1", 10, 1000, iostreams.NewStatusLine(&errOut, func() int { return 200 }), false, zerolog.Nop(),
		func(time.Duration) (<-chan time.Time, func()) { return make(chan time.Time), func() {} },
		5*time.Second, metricsfile.New(), func() time.Time { return now })
	defer p.finish()
	if got := p.line(); strings.Contains(got, "limit") {
		t.Errorf("status %q shows a limit while none is set", got)
	}
	tt, err := bwlimit.Parse("2M")
	if err != nil {
		t.Fatal(err)
	}
	l := bwlimit.New(tt, retrydecorator.SystemClock{})
	p.limiter.Store(l)
	for _, want := range []string{"limit 2.0 MiB/s", "limit off", "limit 2.0 MiB/s"} {
		if got := p.line(); !strings.Contains(got, want) {
			t.Errorf("status %q, want %q", got, want)
		}
		l.Toggle()
	}
}

// The rate of acknowledged bytes is the link's, not the step a new
// connection's buffers take at once: at 1 MB/s with a 1 MB step, looked
// at every 250 ms, it is 1 MB/s; and it is not known before two steps
// between looks agree.
func TestTheDeliveryRateIsTheLinksNotABufferFillingAtOnce(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	var s slope
	var n int64
	for i := 1; i <= 24; i++ {
		now := start.Add(time.Duration(i) * 250 * time.Millisecond)
		n += 250_000
		if i == 12 {
			n += 1_000_000 // a batch's new connection fills its buffers
		}
		s.observe(now, n)
		s.observe(now.Add(time.Millisecond), n) // the ETA's look right after the rate's
		bps, ok := s.rate()
		if i < 3 {
			if ok {
				t.Fatalf("a rate %.0f B/s after %d looks", bps, i)
			}
			continue
		}
		if !ok || math.Abs(bps/1e6-1) > 0.05 {
			t.Fatalf("at %s the rate is %.0f B/s (known %v), want 1 MB/s", now.Sub(start), bps, ok)
		}
	}
}

// On a long fat link the run's first second is a ramp (the batches in
// flight grow one round trip at a time) and the whole run a few seconds:
// the rate is known as soon as the looks' steps stop growing and agree,
// and it is the rate the link then carries, not an average over the
// ramp; while they still grow it is not known.
func TestTheDeliveryRateIsKnownOnceTheRampEnds(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	var s slope
	var n int64
	steps := []int64{500_000, 1_000_000, 2_000_000, 4_000_000, 6_000_000, 6_000_000, 6_000_000, 6_000_000} // every 250 ms
	for i, d := range steps {
		n += d
		s.observe(start.Add(time.Duration(i+1)*250*time.Millisecond), n)
		bps, ok := s.rate()
		switch {
		case i < 5 && ok:
			t.Fatalf("after %d looks, the steps still growing, a rate %.0f B/s", i+1, bps)
		case i >= 5 && (!ok || math.Abs(bps/24e6-1) > 0.1):
			t.Fatalf("after %d looks, two steps at 24 MB/s, the rate is %.0f B/s (known %v)", i+1, bps, ok)
		}
	}
}

// fakeSockets is the uploader's connections as the progress sees them.
type fakeSockets struct {
	acked, inFlight int64
	lag             time.Duration // < 0: not measured yet
	// held is the bodies of the batches answered and not settled, by
	// operation ID (counted in flight).
	held map[string]int64
	// answers is the batches' answers, oldest first (all of them: the
	// tests' are fewer than sockmeter keeps).
	answers []sockmeter.Answer
}

func (f *fakeSockets) Acked() (int64, bool) { return f.acked, true }
func (f *fakeSockets) InFlight() (int64, bool) {
	n := f.inFlight
	for _, b := range f.held {
		n += b
	}
	return n, true
}
func (f *fakeSockets) Settled(key string) { delete(f.held, key) }
func (f *fakeSockets) SettledAll()        { clear(f.held) }
func (f *fakeSockets) AnswerLag() (time.Duration, bool) {
	return f.lag, f.lag >= 0
}
func (f *fakeSockets) Answers() []sockmeter.Answer {
	return slices.Clone(f.answers)
}

// Every body is handed to the connections at once and the link
// acknowledges 100 kB/s of them; answers come 2 s after a batch's last
// byte is acknowledged. The ETA is what is not acknowledged at that rate
// plus the 2 s, within 5%, not what is not handed over (nothing); and
// there is none before an answer's lag is measured.
func TestTheETAIsWhatIsNotAcknowledgedAtTheirRatePlusTheAnswerLag(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	const tiles, size = 100, 10_000
	sock := &fakeSockets{lag: -1}
	p, sent := wiredProgress(t, tiles, size, &now, sock)
	whole := int64(tiles * (size + wireOverheadPerTile))
	sent.n.Add(whole)
	start := now
	for i := 1; i <= 32; i++ {
		now = start.Add(time.Duration(i) * 250 * time.Millisecond)
		delivered := int64(now.Sub(start).Seconds() * 100_000)
		sock.acked, sock.inFlight = delivered, delivered // every batch waits for its answer
		if i == 12 {
			sock.lag = 2 * time.Second // the first batch answered
		}
		p.lookDelivered()
		eta, ok := p.eta()
		if sock.lag < 0 {
			if ok {
				t.Fatalf("at %s an ETA %s before any answer's lag is known", now.Sub(start), eta)
			}
			continue
		}
		want := float64(whole-delivered)/100_000 + 2
		if !ok || math.Abs(eta.Seconds()/want-1) > 0.05 {
			t.Fatalf("at %s ETA %s (known %v), want %.1fs", now.Sub(start), eta, ok, want)
		}
	}
}

// Neither the status line nor the progress log shows a number that is
// not measured: before the flight's total is counted it is "?", before
// the acknowledged bytes' rate is known the rate is "-/s"
// (null), and before a request's answer lag is known there is no ETA
// (null); each shows once it is known.
func TestTheStatusLineShowsNoNumberThatIsNotKnown(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	var logs bytes.Buffer
	p := newProgress("F", -1, 0, nil, true, zerolog.New(&logs), nil, time.Second, metricsfile.New(), func() time.Time { return now })
	sent := unlimitedSent(t)
	sock := &fakeSockets{lag: -1}
	p.countWire(sent, sock)
	check := func(when string, want, wantNot []string, wantLog string) {
		t.Helper()
		line := p.line()
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: status %q, want %q", when, line, w)
			}
		}
		for _, w := range wantNot {
			if strings.Contains(line, w) {
				t.Errorf("%s: status %q shows %q", when, line, w)
			}
		}
		logs.Reset()
		p.logLine()
		if !strings.Contains(logs.String(), wantLog) {
			t.Errorf("%s: progress log %s, want %s", when, strings.TrimSpace(logs.String()), wantLog)
		}
	}
	check("at the start", []string{"0/? tiles", "/?", "-/s"}, []string{"ETA"},
		`"tiles_total":null,"bytes_done":0,"bytes_total":null,"rate_bytes_per_second":null,"eta_seconds":null`)
	p.setTotal(100, 1_000_000)
	sent.n.Add(100_000)
	for i := 1; i <= 8; i++ { // 100 kB/s acknowledged for 2 s
		now = now.Add(250 * time.Millisecond)
		sock.acked, sock.inFlight = int64(i)*25_000, int64(i)*25_000
		p.lookDelivered()
	}
	check("with a rate and no answer yet", []string{"0/100 tiles", "KiB/s"}, []string{"ETA", "-/s"}, `"eta_seconds":null`)
	sock.lag = time.Second
	check("once a request was answered", []string{"ETA "}, nil, `"eta_seconds":`)
	if strings.Contains(logs.String(), `"eta_seconds":null`) {
		t.Errorf("progress log %s, want an ETA", logs.String())
	}
}

// A short ETA is smoothed over a time short against it: shown 3 s when
// the estimates, looked at every 250 ms, agree on 1.5 s, it is within a
// fifth of the time left after three looks, where a blend over a second
// and a half would still show a third more than is left at the end of a
// run lasting a few seconds.
func TestAShortETAFollowsItsEstimatesWithinASecond(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	m := newRateMeter(start)
	m.blendAt(start, 3)
	end := start.Add(1500 * time.Millisecond)
	var eta time.Duration
	for i := 1; i <= 3; i++ {
		now := start.Add(time.Duration(i) * 250 * time.Millisecond)
		eta = m.blendAt(now, end.Sub(now).Seconds())
	}
	if left := 750 * time.Millisecond; math.Abs(eta.Seconds()/left.Seconds()-1) > 0.2 {
		t.Fatalf("ETA %s after three looks agreeing on %s left", eta, left)
	}
}

// settleAll has the flight's tiles settle in batches of ten, one tile of
// each rejected, every body acknowledged and answered (the sockets hold
// none in flight), looking every 250 ms, and returns the time after the
// last.
func settleAll(p *progress, sock *fakeSockets, sent *sentCounter, now *time.Time, tiles, size int) {
	for b := 0; b < tiles/10; b++ {
		body := int64(10 * (size + wireOverheadPerTile))
		sent.n.Add(body)
		*now = now.Add(250 * time.Millisecond)
		sock.acked += body
		p.lookDelivered()
		p.batch(uploader.BatchProgress{Tiles: 10, Bytes: int64(10 * size), Uploaded: 9, Rejected: 1})
		p.eta()
	}
}

// A rejected tile was delivered: once every batch is settled, with one
// tile of each rejected and not sent again in the run, nothing is left to
// deliver and the ETA is the answer lag counting down to 0, not the
// rejected tiles' bytes at the rate forever. A tile left waiting past the
// deadline for the provider's advice is not sent in the run either.
func TestRejectedAndDeferredTilesAreNotLeftToDeliver(t *testing.T) {
	t.Parallel()
	for _, deferred := range []bool{false, true} {
		now := time.Unix(1_700_000_000, 0)
		const tiles, size = 100, 10_000
		all := tiles
		if deferred {
			all += 10 // ten tiles whose batch waits past the deadline
		}
		p := newProgress("F", all, int64(all*size), nil, true, zerolog.Nop(), nil, time.Second, metricsfile.New(), func() time.Time { return now })
		sent := unlimitedSent(t)
		sock := &fakeSockets{lag: time.Second}
		p.countWire(sent, sock)
		if deferred {
			p.wait(uploader.Wait{Reason: uploader.WaitProviderAdvice, Tiles: 10, Until: now.Add(time.Hour), PastDeadline: true})
		}
		settleAll(p, sock, sent, &now, tiles, size)
		end := now
		var eta time.Duration
		for now.Sub(end) < 3*time.Second {
			now = now.Add(250 * time.Millisecond)
			p.lookDelivered()
			var ok bool
			if eta, ok = p.eta(); !ok {
				t.Fatalf("deferred %v: no ETA %s after the last batch settled", deferred, now.Sub(end))
			}
			if eta > 1500*time.Millisecond {
				t.Fatalf("deferred %v: ETA %s %s after every batch settled with a 1s answer lag", deferred, eta, now.Sub(end))
			}
		}
		if eta > 100*time.Millisecond {
			t.Fatalf("deferred %v: ETA %s 3s after every batch settled, want the 1s lag counted down", deferred, eta)
		}
	}
}

// A retry sends the rejected tiles again: what is still to deliver is
// then what the flight has pending, so that the ETA is not early by them.
func TestARetryCountsTheRejectedTilesToDeliverAgain(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	const tiles, size = 100, 10_000
	sock := &fakeSockets{lag: time.Second}
	p, sent := wiredProgress(t, tiles, size, &now, sock)
	settleAll(p, sock, sent, &now, tiles, size) // 415 kB/s acknowledged
	for range 4 {                               // the answer lag counts down
		now = now.Add(250 * time.Millisecond)
		p.lookDelivered()
		p.eta()
	}
	p.hooks().OnRetry(retrydecorator.RetryEvent{FlightID: "F", Attempt: 1, Sleep: time.Second, Pending: 10, PendingBytes: 10 * size, Rejected: 10})
	now = now.Add(250 * time.Millisecond)
	p.lookDelivered()
	bps, ok := p.rate()
	if !ok {
		t.Fatal("no rate")
	}
	left := time.Duration((float64(10*(size+wireOverheadPerTile))/bps + 1) * float64(time.Second))
	// Blended from the countdown's last value: at least half of it.
	if eta, ok := p.eta(); !ok || eta < left/2 {
		t.Fatalf("ETA %s (known %v) with 10 rejected tiles to send again, want about %s", eta, ok, left)
	}
}

// A batch answered and not yet recorded (its Store transaction, its
// lookups) counts delivered all along: the sockets hold it in flight
// until the progress has it settled, and the progress takes it from them
// as it counts it, so that the ETA's countdown at the end is not
// restarted by the gap.
func TestAnAnsweredBatchIsDeliveredUntilItSettles(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	const tiles, size = 10, 10_000
	sock := &fakeSockets{lag: 2 * time.Second, held: map[string]int64{}}
	p, sent := wiredProgress(t, tiles, size, &now, sock)
	body := int64(tiles * (size + wireOverheadPerTile))
	sent.n.Add(body)
	for i := int64(1); i <= 8; i++ {
		now = now.Add(250 * time.Millisecond)
		sock.acked, sock.inFlight = body*i/8, body*i/8
		p.lookDelivered()
		p.eta()
	}
	sock.inFlight, sock.held["op-1"] = 0, body // answered, being recorded
	var last time.Duration
	for i := range 4 {
		now = now.Add(250 * time.Millisecond)
		eta, ok := p.eta()
		if !ok || (i > 0 && eta > last) {
			t.Fatalf("ETA %s (known %v) after %s, %s before, while the answered batch is recorded", eta, ok, last, now)
		}
		last = eta
	}
	p.batch(uploader.BatchProgress{OpID: "op-1", Tiles: tiles, Bytes: tiles * size, Uploaded: tiles - 1, Rejected: 1})
	if len(sock.held) != 0 {
		t.Fatalf("the sockets still hold %v once the batch settled", sock.held)
	}
	if n, _ := sock.InFlight(); n != 0 || p.delivered.Load() != body {
		t.Fatalf("%d B in flight and %d B delivered once the batch settled, want 0 and %d", n, p.delivered.Load(), body)
	}
	// One the flight's calls answered and never settled (its resends
	// spent) is not the next flight's in flight.
	sock.held["op-2"] = body
	p.finish()
	if len(sock.held) != 0 {
		t.Fatalf("the sockets still hold %v once the flight finished", sock.held)
	}
}

// A link that delivered 100 kB/s, with batches answered along the way,
// stalls with most of the flight still to deliver: from the moment the
// rate of the moment says nothing moves, the ETA is unknown (null) or
// more than what is left at the old rate; it never counts down to 0
// with bytes left, as if the answers' ends were still coming.
func TestAStallWithBytesLeftNeverShowsTheETAAtZero(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	const tiles, size = 100, 10_000
	sock := &fakeSockets{lag: 500 * time.Millisecond}
	p, sent := wiredProgress(t, tiles, size, &now, sock)
	whole := int64(tiles * (size + wireOverheadPerTile))
	sent.n.Add(whole)
	start := now
	var delivered int64
	for i := 1; i <= 120; i++ { // 30 s, a look every 250 ms
		now = start.Add(time.Duration(i) * 250 * time.Millisecond)
		if i <= 28 { // 7 s at 100 kB/s, then nothing moves
			delivered = int64(now.Sub(start).Seconds() * 100_000)
			sock.acked, sock.inFlight = delivered, delivered
			if i%4 == 0 {
				sock.answers = append(sock.answers, sockmeter.Answer{At: now, Acked: delivered - 50_000})
			}
		}
		p.lookDelivered()
		eta, ok := p.eta()
		if i > 28 && ok && eta <= 0 {
			t.Fatalf("%s into a stall with %d bytes left, the ETA shows %s", now.Sub(start.Add(7*time.Second)), whole-delivered, eta)
		}
	}
}

// wiredProgress is the progress of a flight of tiles of size bytes on
// the clock *now, counting the bodies handed to the connections (sent, no
// bandwidth limit) and what sock says the connections carried.
func wiredProgress(t *testing.T, tiles, size int, now *time.Time, sock sockets) (*progress, *sentCounter) {
	t.Helper()
	p := newProgress("F", tiles, int64(tiles*size), nil, true, zerolog.Nop(), nil, time.Second, metricsfile.New(), func() time.Time { return *now })
	sent := unlimitedSent(t)
	p.countWire(sent, sock)
	return p, sent
}

// unlimitedSent is the count of bytes handed to the connections with no
// bandwidth limit, as a run without --bwlimit has it.
func unlimitedSent(t *testing.T) *sentCounter {
	t.Helper()
	tt, err := bwlimit.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	return &sentCounter{limit: bwlimit.New(tt, retrydecorator.SystemClock{})}
}
