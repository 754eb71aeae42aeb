package concurrency_test

import (
	"cmp"
	"container/heap"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/tilectl/tilectl/uploader/concurrency"
)

// clock is a fake clock the simulation moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// link is one shared bottleneck: batches queue for it first in, first
// out at rate bytes per second each way, then take the propagation delay
// (the round trip, answer included).
type link struct {
	rate  func(t time.Time) float64 // bytes per second
	delay func(t time.Time) time.Duration
	// throttle, if positive, is how many batches per second the provider
	// takes; a batch beyond it is answered 429 after the delay, and its
	// sender waits retryAfter holding its slot.
	throttle   int
	retryAfter time.Duration

	// handshake, if positive, is what a batch on a connection opened for
	// it pays on top (a handshake in the connection's first round trip):
	// a connection is opened when every one open is busy, and kept.
	handshake   time.Duration
	conns, busy int

	freeAt time.Time
	starts []time.Time
}

// connect takes a connection for a batch: an idle one, or a new one
// (true).
func (l *link) connect() bool {
	l.busy++
	if l.busy <= l.conns {
		return false
	}
	l.conns++
	return true
}

// send is one batch of size bytes started at t: when it ends and what it
// says.
func (l *link) send(t time.Time, size int) (time.Time, concurrency.Signal, time.Time) {
	if l.throttle > 0 {
		recent := l.starts[:0]
		for _, s := range l.starts {
			if t.Sub(s) < time.Second {
				recent = append(recent, s)
			}
		}
		l.starts = recent
		if len(l.starts) >= l.throttle {
			end := t.Add(l.delay(t))
			return end, concurrency.Overloaded, end.Add(l.retryAfter)
		}
		l.starts = append(l.starts, t)
	}
	start := l.freeAt
	if start.Before(t) {
		start = t
	}
	l.freeAt = start.Add(time.Duration(float64(size) / l.rate(t) * float64(time.Second)))
	end := l.freeAt.Add(l.delay(t))
	return end, concurrency.Answered, end
}

type flight struct {
	at               time.Time // the next event: its answer, then (after a wait) its slot's release
	answered         bool
	start, end, free time.Time
	sig              concurrency.Signal
	newConn          bool
	release          func()
}

type flights []flight

func (f flights) Len() int           { return len(f) }
func (f flights) Less(i, j int) bool { return f[i].at.Before(f[j].at) }
func (f flights) Swap(i, j int)      { f[i], f[j] = f[j], f[i] }
func (f *flights) Push(x any)        { *f = append(*f, x.(flight)) }
func (f *flights) Pop() any {
	old := *f
	x := old[len(old)-1]
	*f = old[:len(old)-1]
	return x
}

// sim drives a Controller against a link with always more batches to
// send, on a fake clock.
type sim struct {
	t     *testing.T
	clk   *clock
	c     *concurrency.Controller
	l     *link
	size  int
	q     flights
	done  []time.Time // answer times of answered batches
	total int         // batches sent
	over  int         // batches answered overloaded
}

const batchBytes = 8 * 16 << 10 // 8 tiles of 16 KiB

func newSim(t *testing.T, l *link, o concurrency.Options) *sim {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	o.Now = clk.now
	return &sim{t: t, clk: clk, c: concurrency.New(o), l: l, size: batchBytes}
}

// run moves the simulation on by d.
func (s *sim) run(d time.Duration) {
	until := s.clk.t.Add(d)
	for {
		for s.c.State().InFlight < s.c.Limit() {
			rel, err := s.c.Acquire(context.Background())
			if err != nil {
				s.t.Fatal(err)
			}
			end, sig, free := s.l.send(s.clk.t, s.size)
			fresh := s.l.connect()
			if fresh {
				end, free = end.Add(s.l.handshake), free.Add(s.l.handshake)
			}
			heap.Push(&s.q, flight{at: end, start: s.clk.t, end: end, free: free, sig: sig, newConn: fresh,
				release: func() { s.l.busy--; rel() }})
			s.total++
		}
		if s.q.Len() == 0 || s.q[0].at.After(until) {
			s.clk.t = until
			return
		}
		f := heap.Pop(&s.q).(flight)
		s.clk.t = f.at
		if f.answered {
			f.release()
			continue
		}
		s.c.Observe(concurrency.Sample{Start: f.start, End: f.end, Signal: f.sig, NewConn: f.newConn})
		if f.sig == concurrency.Answered {
			s.done = append(s.done, f.end)
		} else {
			s.over++
		}
		if f.free.After(f.end) {
			f.at, f.answered = f.free, true
			heap.Push(&s.q, f)
			continue
		}
		f.release()
	}
}

// share is the bytes answered in [from, to) over what rate allows.
func (s *sim) share(from, to time.Time, rate float64) float64 {
	n := 0
	for _, d := range s.done {
		if !d.Before(from) && d.Before(to) {
			n++
		}
	}
	return float64(n*s.size) / (rate * to.Sub(from).Seconds())
}

func constRate(mbit float64) func(time.Time) float64 {
	return func(time.Time) float64 { return mbit * 1e6 / 8 }
}

func constDelay(d time.Duration) func(time.Time) time.Duration {
	return func(time.Time) time.Duration { return d }
}

func TestControllerFillsAnUncongestedLongLinkWithinSecondsAndQueuesLittle(t *testing.T) {
	t.Parallel()
	rate := 100e6 / 8
	s := newSim(t, &link{rate: constRate(100), delay: constDelay(200 * time.Millisecond)}, concurrency.Options{})
	start := s.clk.t
	s.run(30 * time.Second)
	// The bandwidth-delay product is about 19 batches.
	bdp := rate * 0.2 / batchBytes
	if got := s.share(start.Add(3*time.Second), s.clk.t, rate); got < 0.9 {
		t.Errorf("share of the link from 3 s on = %.2f, want >= 0.9 (limit %d, state %+v)", got, s.c.Limit(), s.c.State())
	}
	if got := s.share(start, start.Add(3*time.Second), rate); got < 0.6 {
		t.Errorf("share of the link in the first 3 s = %.2f, want >= 0.6", got)
	}
	if lim := s.c.Limit(); float64(lim) > 2*bdp+8 {
		t.Errorf("limit = %d on a link of %.0f batches in flight: a standing queue", lim, bdp)
	}
}

func TestControllerFillsALongLinkWhoseNewConnectionsPayAHandshake(t *testing.T) {
	t.Parallel()
	// 200 Mbit/s, 150 ms: about 29 batches in flight fill it. Every slot
	// the limit adds opens a connection whose first batch takes a round
	// trip more: slow start doubles into a burst of them, which is not a
	// queue.
	rate := 200e6 / 8
	s := newSim(t, &link{rate: constRate(200), delay: constDelay(150 * time.Millisecond), handshake: 150 * time.Millisecond},
		concurrency.Options{})
	start := s.clk.t
	s.run(10 * time.Second)
	if got := s.share(start, start.Add(2*time.Second), rate); got < 0.6 {
		t.Errorf("share of the link in the first 2 s = %.2f, want >= 0.6 (state %+v)", got, s.c.State())
	}
	if got := s.share(start.Add(2*time.Second), s.clk.t, rate); got < 0.9 {
		t.Errorf("share of the link from 2 s on = %.2f, want >= 0.9 (state %+v)", got, s.c.State())
	}
}

// Slow start grows by the answers that came back, not by a round trip's
// first answer: a round's first answer (on a connection already open)
// may come a round trip before the others (on connections opened for
// them), and doubling on it alone would double again before the others
// say whether the provider took them.
func TestControllerSlowStartGrowsByTheAnswersThatCameBack(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := concurrency.New(concurrency.Options{Now: clk.now})
	t0 := clk.t
	var rel []func()
	for range 8 {
		r, err := c.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		rel = append(rel, r)
	}
	clk.t = t0.Add(100 * time.Millisecond)
	// Each answer's slot goes to the next batch at once, and new slots
	// are taken as soon as the limit gives them.
	fill := func() {
		for c.State().InFlight < c.Limit() {
			r, err := c.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rel = append(rel, r)
		}
	}
	c.Observe(concurrency.Sample{Start: t0, End: clk.t})
	rel[0]()
	if got := c.Limit(); got != 9 {
		t.Fatalf("limit after the first of 8 answers = %d, want 9", got)
	}
	fill()
	clk.t = t0.Add(200 * time.Millisecond)
	for i := 1; i < 5; i++ {
		c.Observe(concurrency.Sample{Start: t0, End: clk.t, NewConn: true})
		rel[i]()
		fill()
	}
	if got := c.Limit(); got != 13 {
		t.Fatalf("limit after 5 of 8 answers = %d, want 13 (the three not answered yet do not count)", got)
	}
}

// A slot slow start adds is taken when a worker has claimed a batch for
// it, a little after the answer that added it: the batches then hold all
// but the newest slot when the next answer comes. Slow start still
// doubles the limit in the round trip whose answers all came back, and it
// says so ahead: the connections to open for the next round.
func TestControllerSlowStartDoublesWhenNewSlotsAreTakenAClaimLater(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := concurrency.New(concurrency.Options{Now: clk.now})
	// Before the batches' size is known, the first round may hold four
	// times Initial (ExpectBatchBytes): their connections open during the
	// capabilities request.
	if got := c.Ahead(); got != 4*concurrency.DefaultInitial {
		t.Fatalf("ahead at the start = %d, want %d", got, 4*concurrency.DefaultInitial)
	}
	c.ExpectBatchBytes(concurrency.DefaultInitialBytes / concurrency.DefaultInitial)
	if got := c.Ahead(); got != 2*concurrency.DefaultInitial {
		t.Fatalf("ahead at the start, batches of %d bytes = %d, want %d",
			concurrency.DefaultInitialBytes/concurrency.DefaultInitial, got, 2*concurrency.DefaultInitial)
	}
	t0 := clk.t
	acquire := func() func() {
		r, err := c.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var rel []func()
	for range concurrency.DefaultInitial {
		rel = append(rel, acquire())
	}
	clk.t = t0.Add(150 * time.Millisecond)
	pending := 0 // slots the limit gave that no batch has taken yet
	for i := range concurrency.DefaultInitial {
		before := c.Limit()
		c.Observe(concurrency.Sample{Start: t0, End: clk.t})
		rel[i]()
		rel[i] = acquire() // the answered batch's worker claims the next
		for ; pending > 0; pending-- {
			rel = append(rel, acquire()) // the slots the last answer gave, a claim later
		}
		pending = c.Limit() - before
	}
	if got, want := c.Limit(), 2*concurrency.DefaultInitial; got != want {
		t.Fatalf("limit after the first round's %d answers = %d, want %d", concurrency.DefaultInitial, got, want)
	}
	if got, want := c.Ahead(), 4*concurrency.DefaultInitial; got != want {
		t.Fatalf("ahead in slow start at limit %d = %d, want %d", c.Limit(), got, want)
	}
	for _, r := range rel {
		r()
	}
}

func TestControllerStaysNearItsFloorWhereTheLinkIsNarrow(t *testing.T) {
	t.Parallel()
	// 5 Mbit/s, 700 ms: under two batches fill it.
	s := newSim(t, &link{rate: constRate(5), delay: constDelay(700 * time.Millisecond)}, concurrency.Options{})
	start := s.clk.t
	s.run(5 * time.Second)
	// The limit moves within a few batches of its floor as it measures
	// (the least round trip is measured afresh every BaseWindow): its
	// mean over the run, not where it is at one moment, says where it
	// stays. Near the floor is the floor and the batches Vegas lets
	// queue there (beta, about 5).
	sum, n := 0, 0
	for range 550 {
		s.run(100 * time.Millisecond)
		sum, n = sum+s.c.Limit(), n+1
	}
	if got := s.share(start.Add(5*time.Second), s.clk.t, 5e6/8); got < 0.9 {
		t.Errorf("share = %.2f, want >= 0.9", got)
	}
	if mean := float64(sum) / float64(n); mean > 9 {
		t.Errorf("mean limit = %.1f on a link that two batches fill, want <= 9 (state %+v)", mean, s.c.State())
	}
}

func TestControllerFollowsALinkWhoseRateChanges(t *testing.T) {
	t.Parallel()
	var at time.Time
	mbit := func(t time.Time) float64 {
		switch d := t.Sub(at); {
		case d < 20*time.Second:
			return 200
		case d < 40*time.Second:
			return 20
		}
		return 200
	}
	s := newSim(t, &link{rate: func(t time.Time) float64 { return mbit(t) * 1e6 / 8 }, delay: constDelay(150 * time.Millisecond)},
		concurrency.Options{})
	at = s.clk.t
	s.run(20 * time.Second)
	high := s.c.Limit()
	s.run(10 * time.Second)
	low := s.c.Limit()
	s.run(10 * time.Second)
	if got := s.share(at.Add(30*time.Second), at.Add(40*time.Second), 20e6/8); got < 0.85 {
		t.Errorf("share at 20 Mbit/s, from 10 s after the drop = %.2f, want >= 0.85", got)
	}
	if low >= high/2 {
		t.Errorf("limit %d at 200 Mbit/s, %d 10 s after the rate fell tenfold: want it at most halved", high, low)
	}
	s.run(20 * time.Second)
	if got := s.share(at.Add(50*time.Second), at.Add(60*time.Second), 200e6/8); got < 0.85 {
		t.Errorf("share at 200 Mbit/s, from 10 s after the rise = %.2f, want >= 0.85 (state %+v)", got, s.c.State())
	}
}

func TestControllerFollowsALinkThatGetsLonger(t *testing.T) {
	t.Parallel()
	// The route changes from 50 ms to 600 ms: the least round trip seen
	// before must not hold the limit down for good.
	var at time.Time
	delay := func(t time.Time) time.Duration {
		if t.Sub(at) < 15*time.Second {
			return 50 * time.Millisecond
		}
		return 600 * time.Millisecond
	}
	s := newSim(t, &link{rate: constRate(100), delay: delay}, concurrency.Options{})
	at = s.clk.t
	s.run(15 * time.Second)
	s.run(45 * time.Second)
	if got := s.share(at.Add(45*time.Second), at.Add(60*time.Second), 100e6/8); got < 0.85 {
		t.Errorf("share 30 s after the route got longer = %.2f, want >= 0.85 (state %+v)", got, s.c.State())
	}
}

func TestControllerCutsOnOverloadOncePerRoundTrip(t *testing.T) {
	t.Parallel()
	for _, sig := range []concurrency.Signal{concurrency.Overloaded, concurrency.TimedOut} {
		s := newSim(t, &link{rate: constRate(100), delay: constDelay(200 * time.Millisecond)}, concurrency.Options{})
		s.run(20 * time.Second)
		before := s.c.Limit()
		now := s.clk.t
		for range 10 { // the whole window says so at once: one signal
			s.c.Observe(concurrency.Sample{Start: now.Add(-time.Second), End: now, Signal: sig})
		}
		once := s.c.Limit()
		switch sig {
		case concurrency.TimedOut:
			if want := before / 2; once > want || once < want-1 {
				t.Errorf("timeout: limit %d after ten within a round trip, from %d: want it halved once", once, before)
			}
		case concurrency.Overloaded:
			// What the provider answered in the last second, times the
			// least round trip: about the link's 19 batches in flight.
			if once >= before || once < 10 {
				t.Errorf("429: limit %d after ten within a round trip, from %d: want it at the rate answered (about 19), once", once, before)
			}
		}
		s.clk.t = now.Add(time.Second)
		s.c.Observe(concurrency.Sample{Start: now, End: s.clk.t, Signal: sig})
		if got := s.c.Limit(); got >= once {
			t.Errorf("signal %d: limit %d after a second overload a round trip later, from %d: want it lower", sig, got, once)
		}
		if st := s.c.State(); st.Cuts != 2 {
			t.Errorf("signal %d: cuts = %d, want 2", sig, st.Cuts)
		}
	}
}

func TestControllerAgainstAThrottlingProviderKeepsOverloadsRare(t *testing.T) {
	t.Parallel()
	// The provider takes 20 batches a second and answers 429 with
	// Retry-After: 1 beyond it; the link itself is wide.
	l := &link{rate: constRate(1000), delay: constDelay(150 * time.Millisecond), throttle: 20, retryAfter: time.Second}
	s := newSim(t, l, concurrency.Options{})
	start := s.clk.t
	s.run(60 * time.Second)
	if share := float64(s.over) / float64(s.total); share > 0.1 {
		t.Errorf("%d of %d batches answered 429 (%.0f%%), want at most 10%%", s.over, s.total, 100*share)
	}
	got := 0
	for _, d := range s.done {
		if d.Sub(start) >= 10*time.Second {
			got++
		}
	}
	// A limit on batches in flight meets a limit on batches a second only
	// in whole batches, and a batch told to wait holds its slot: 2 in
	// flight take 13 a second here, 3 take 20 and then some.
	if rate := float64(got) / 50; rate < 0.6*20 {
		t.Errorf("%.1f batches/s answered from 10 s on, want >= 12 of the 20 allowed", rate)
	}
}

func TestControllerKeepsItsBounds(t *testing.T) {
	t.Parallel()
	s := newSim(t, &link{rate: constRate(100000), delay: constDelay(time.Second)}, concurrency.Options{Max: 32})
	s.run(30 * time.Second)
	if got := s.c.Limit(); got != 32 {
		t.Errorf("limit on a link far wider than 32 batches = %d, want the maximum 32", got)
	}
	for i := range 20 {
		s.clk.t = s.clk.t.Add(10 * time.Second)
		s.c.Observe(concurrency.Sample{Start: s.clk.t.Add(-time.Second), End: s.clk.t, Signal: concurrency.Overloaded})
		if got := s.c.Limit(); got < 1 {
			t.Fatalf("limit after %d overloads = %d, want at least 1", i+1, got)
		}
	}
	if got := s.c.Limit(); got != 1 {
		t.Errorf("limit after 20 overloads = %d, want the minimum 1", got)
	}
}

func TestControllerAcquireWaitsForASlotAndEndsWithItsContext(t *testing.T) {
	t.Parallel()
	c := concurrency.New(concurrency.Options{Initial: 2, Max: 2})
	r1, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		rel, err := c.Acquire(ctx)
		if rel != nil {
			rel()
		}
		got <- err
	}()
	r1()
	r1() // a second release gives nothing back
	if err := <-got; err != nil {
		t.Fatalf("Acquire after a release: %v", err)
	}
	cancel()
	if st := c.State(); st.InFlight != 1 {
		t.Fatalf("in flight = %d, want 1", st.InFlight)
	}
	if _, err := c.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx); err == nil {
		t.Fatal("Acquire with a full gate and an ended context returned no error")
	}
}

func TestFixedHoldsItsLimitWhateverItHears(t *testing.T) {
	t.Parallel()
	f := concurrency.NewFixed(3)
	for range 5 {
		f.Observe(concurrency.Sample{Signal: concurrency.Overloaded})
	}
	f.Overloaded()
	if f.Limit() != 3 {
		t.Fatalf("limit = %d, want 3", f.Limit())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for i := range 3 {
		if _, err := f.Acquire(ctx); err != nil {
			t.Fatalf("slot %d: %v", i+1, err)
		}
	}
	if _, err := f.Acquire(ctx); err == nil {
		t.Fatal("a fourth slot of three was given")
	}
}

// A throttle at the run's start, a fifth of a second after the first
// batches went out (the provider took its burst of five and refused the
// rest), leaves about as many in flight as the rate it took needs at the
// round trip (five in 0.2 s, 25 a second, times 0.2 s: five, a little
// under it: four): it is not taken as five answers over a whole second,
// which would say one, or nothing to go by.
func TestControllerThrottledAtTheStartKeepsWhatTheRateItTookNeeds(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	c := concurrency.New(concurrency.Options{Now: clk.now, Initial: 32})
	t0 := clk.t
	clk.t = t0.Add(200 * time.Millisecond)
	for range 5 {
		c.Observe(concurrency.Sample{Start: t0, End: clk.t, Signal: concurrency.Answered})
	}
	clk.t = t0.Add(205 * time.Millisecond)
	c.Observe(concurrency.Sample{Start: t0, End: clk.t, Signal: concurrency.Overloaded})
	if got := c.Limit(); got < 3 || got > 6 {
		t.Fatalf("limit %d after a throttle at the start, want about 4 (a little under 25 batches/s at 0.2 s)", got)
	}
}

// A throttle the pacer answers (Paced: the starts are spaced just under
// the rate the provider took) leaves the limit at what that rate needs in
// flight, not under it: a limit under the paced rate would slow the run a
// second time. Unpaced, the limit alone keeps under the rate.
func TestControllerLeavesAPacedThrottleTheBatchesItsRateNeeds(t *testing.T) {
	t.Parallel()
	throttle := func(paced bool) int {
		clk := &clock{t: time.Unix(1_700_000_000, 0)}
		c := concurrency.New(concurrency.Options{Now: clk.now, Initial: 32})
		// 20 answers a second, each 150 ms on the wire: 3 in flight carry
		// the rate.
		start := clk.t
		for i := range 40 {
			clk.t = start.Add(time.Duration(i) * 50 * time.Millisecond)
			c.Observe(concurrency.Sample{Start: clk.t.Add(-150 * time.Millisecond), End: clk.t, Signal: concurrency.Answered})
		}
		clk.t = clk.t.Add(10 * time.Millisecond)
		c.Observe(concurrency.Sample{Start: clk.t.Add(-150 * time.Millisecond), End: clk.t, Signal: concurrency.Overloaded, Paced: paced})
		return c.Limit()
	}
	if got := throttle(true); got < 3 || got > 4 {
		t.Errorf("limit %d after a paced throttle at 20 batches/s and 150 ms, want 3 or 4 (what the rate needs)", got)
	}
	if got := throttle(false); got >= 3 {
		t.Errorf("limit %d after an unpaced throttle at 20 batches/s and 150 ms, want under 3 (under the rate)", got)
	}
}

// Before anything is measured the limit holds InitialBytes of the
// batches the run expects, and never fewer than Initial batches: a run of
// small batches starts with more of them, one of large batches with no
// more than Initial. What the limit measured (an answer, an overload)
// then decides, and a later expectation changes nothing.
func TestControllerStartsWithTheBytesInFlightOfItsInitialWindow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		o     concurrency.Options
		bytes int64
		want  int
	}{
		{"small batches", concurrency.Options{}, 64 << 10, concurrency.DefaultInitialBytes / (64 << 10)},
		{"batches of the initial window's size over Initial", concurrency.Options{}, concurrency.DefaultInitialBytes / concurrency.DefaultInitial, concurrency.DefaultInitial},
		{"large batches", concurrency.Options{}, 8 << 20, concurrency.DefaultInitial},
		{"unknown size", concurrency.Options{}, 0, concurrency.DefaultInitial},
		{"small batches, a low maximum", concurrency.Options{Max: 12}, 64 << 10, 12},
		{"tiny batches", concurrency.Options{}, 4 << 10, 4 * concurrency.DefaultInitial},
		{"a window of its own", concurrency.Options{InitialBytes: 1 << 20, Initial: 4}, 128 << 10, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{t: time.Unix(1_700_000_000, 0)}
			c.o.Now = clk.now
			ctl := concurrency.New(c.o)
			ctl.ExpectBatchBytes(c.bytes)
			if got := ctl.Limit(); got != c.want {
				t.Fatalf("limit expecting batches of %d bytes = %d, want %d", c.bytes, got, c.want)
			}
			// Slow start may double it in the first round trip: the
			// connections to open ahead.
			if got, want := ctl.Ahead(), min(2*c.want, cmp.Or(c.o.Max, concurrency.DefaultMax)); got != want {
				t.Fatalf("ahead = %d, want %d", got, want)
			}
		})
	}
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	ctl := concurrency.New(concurrency.Options{Now: clk.now})
	t0 := clk.t
	clk.t = t0.Add(150 * time.Millisecond)
	ctl.Observe(concurrency.Sample{Start: t0, End: clk.t})
	measured := ctl.Limit()
	ctl.ExpectBatchBytes(16 << 10)
	if got := ctl.Limit(); got != measured {
		t.Fatalf("limit after an answer and then an expectation of small batches = %d, want it as measured (%d)", got, measured)
	}
}

// A long fat link carried in small batches (200 Mbit/s, 150 ms, batches
// of 4 tiles of 16 KiB: about 57 in flight fill it) is full within a few
// round trips of the start when the controller knows the batches' size:
// its first round holds the initial window's bytes, not Initial batches
// of a size that fills an eighth of it. Every new connection pays a
// handshake, as the first round's do where they were not opened ahead.
func TestControllerFillsALongFatLinkOfSmallBatchesWithinAFewRoundTrips(t *testing.T) {
	t.Parallel()
	rate := 200e6 / 8
	s := newSim(t, &link{rate: constRate(200), delay: constDelay(150 * time.Millisecond), handshake: 150 * time.Millisecond},
		concurrency.Options{})
	s.size = 64 << 10
	s.c.ExpectBatchBytes(int64(s.size))
	start := s.clk.t
	s.run(3 * time.Second)
	if got := s.share(start, start.Add(time.Second), rate); got < 0.5 {
		t.Errorf("share of the link in the first second = %.2f, want >= 0.5 (state %+v)", got, s.c.State())
	}
}

// Slow start passes what a long fat link holds by up to twice, for the
// answers that show the queue come a round trip after the batches that
// found it. The round trips of the rounds after its end are of batches
// that started with that many in flight: the limit the queue brings it
// back to is what fills the link without one, counted from them, and not
// from the lower limit already set, which would take it under the link
// and leave the link idle for the round trips it takes to grow back.
func TestControllerComesBackFromSlowStartsOvershootToWhatFillsTheLink(t *testing.T) {
	t.Parallel()
	for _, size := range []int{64 << 10, 128 << 10} {
		rate := 200e6 / 8
		s := newSim(t, &link{rate: constRate(200), delay: constDelay(150 * time.Millisecond)}, concurrency.Options{})
		s.size = size
		s.c.ExpectBatchBytes(int64(size))
		bdp := int(rate * 0.15 / float64(size))
		top, low := 0, 0
		for range 200 { // 6 s
			s.run(30 * time.Millisecond)
			l := s.c.Limit()
			switch {
			case l >= top && low == 0:
				top = l
			case low == 0 || l < low:
				low = l
			}
		}
		if top <= bdp {
			t.Fatalf("%d KiB batches: the limit rose to %d, not past the %d batches that fill the link: nothing to come back from", size>>10, top, bdp)
		}
		if low < bdp {
			t.Errorf("%d KiB batches: the limit rose to %d and came back to %d, under the %d batches that fill the link", size>>10, top, low, bdp)
		}
	}
}

// A slot that frees goes to an AcquireFirst waiting before any Acquire,
// whichever began to wait first; an Acquire gets the next one. Both wait
// before the slot frees; a gate that gets it wrong fails the test within
// a few seconds instead of hanging it.
func TestAFreedSlotGoesToAcquireFirstBeforeAcquire(t *testing.T) {
	t.Parallel()
	type gate interface {
		Acquire(context.Context) (func(), error)
		AcquireFirst(context.Context) (func(), error)
	}
	for name, g := range map[string]gate{
		"controller": concurrency.New(concurrency.Options{Initial: 1, Max: 1}),
		"fixed":      concurrency.NewFixed(1),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			held, err := g.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			later := make(chan func(), 1)
			go func() {
				rel, err := g.Acquire(ctx)
				if err != nil {
					rel = func() {}
				}
				later <- rel
			}()
			// The Acquire waits before AcquireFirst begins to.
			waitFor(t, func() bool { return concurrency.Blocked(g) == 1 }, "Acquire to wait for the slot")
			first := make(chan func(), 1)
			go func() {
				rel, err := g.AcquireFirst(ctx)
				if err != nil {
					rel = func() {}
				}
				first <- rel
			}()
			waitFor(t, func() bool { return concurrency.Blocked(g) == 2 && concurrency.FirstWaiting(g) == 1 },
				"AcquireFirst to wait for the slot")
			held()
			var rel func()
			select {
			case rel = <-first:
			case <-later:
				t.Fatal("the freed slot went to Acquire, not to the AcquireFirst waiting")
			case <-time.After(5 * time.Second):
				t.Fatal("AcquireFirst got no slot within 5s of it freeing")
			}
			select {
			case <-later:
				t.Fatal("Acquire got a slot while AcquireFirst held the only one")
			case <-time.After(50 * time.Millisecond):
			}
			rel()
			select {
			case rel := <-later:
				rel()
			case <-time.After(5 * time.Second):
				t.Fatal("Acquire got no slot within 5s of AcquireFirst's release")
			}
		})
	}
}

// waitFor waits, up to 5 s, until cond holds, or fails the test.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(end) {
			t.Fatalf("waited 5s for %s", what)
		}
	}
}

// A caller whose context has ended gets no slot, though one is free: a
// gate never hands its work a slot it would only give back (a batch due
// at the run's deadline must not take the slot a batch cut by the same
// deadline just freed).
func TestACallerWhoseContextEndedGetsNoFreeSlot(t *testing.T) {
	t.Parallel()
	for name, g := range testGates() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			for what, acquire := range map[string]func(context.Context) (func(), error){"Acquire": g.Acquire, "AcquireFirst": g.AcquireFirst} {
				if rel, err := acquire(ended); err == nil {
					rel()
					t.Errorf("%s with an ended context took the free slot", what)
				}
			}
		})
	}
}

// A waiter whose context ends as the slot it waits for frees gets the
// context's error every time, not the slot half of the time. Both wake it
// before it runs: one processor, and neither wake yields it.
func TestAWaiterWhoseContextEndsAsTheSlotFreesGetsNoSlot(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for name, g := range testGates() {
		t.Run(name, func(t *testing.T) {
			for i := range 50 {
				held, err := g.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				got := make(chan error, 1)
				go func() {
					rel, err := g.AcquireFirst(ctx)
					if rel != nil {
						rel()
					}
					got <- err
				}()
				waitFor(t, func() bool { return concurrency.FirstWaiting(g) == 1 && concurrency.Blocked(g) == 1 },
					"AcquireFirst to wait for the slot")
				held()
				cancel()
				if err := <-got; err == nil {
					t.Fatalf("round %d: AcquireFirst took the slot that freed as its context ended", i+1)
				}
			}
		})
	}
}

// slotGate is what Controller and Fixed share for taking slots.
type slotGate interface {
	Acquire(context.Context) (func(), error)
	AcquireFirst(context.Context) (func(), error)
}

// testGates are a Controller and a Fixed of one slot each.
func testGates() map[string]slotGate {
	return map[string]slotGate{
		"controller": concurrency.New(concurrency.Options{Initial: 1, Max: 1}),
		"fixed":      concurrency.NewFixed(1),
	}
}
