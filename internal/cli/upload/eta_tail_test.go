package upload

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/internal/metricsfile"
	"github.com/tilectl/tilectl/internal/sockmeter"
	"github.com/tilectl/tilectl/uploader"
)

// bottleneck is a link as the sockets see it: a FIFO queue of at most
// queue bytes before a link that carries rate bytes a second; a byte
// counts acknowledged when the queue takes it (as a real path's sender
// sees its bytes acknowledged at the first hop that buffers them), and a
// request is answered fixed after its last byte left the queue (the way
// there and back, the provider's work). conc requests are in flight at
// once, each taking its turn to put a chunk in the queue while there is
// room. It implements sockets, its answers measured as sockmeter's are.
type bottleneck struct {
	rate, queue   float64
	perConn       float64 // the most one request puts in the queue a second (its window)
	fixed         time.Duration
	conc, batches int
	body          int64 // each request's

	now, t0 time.Time
	acked   int64 // all the queue has taken
	queued  []segment
	qBytes  int64
	drain   float64   // bytes the link may still carry in this step
	reqs    []*simReq // started and not all in the queue yet, in order
	open    []*simReq // started and not answered
	due     []*simReq // through the queue, waiting for their answer
	started int       // requests started
	lags    []time.Duration
	answers []sockmeter.Answer
	settled []*simReq // answered since the progress last took them
}

type simReq struct {
	id       string
	left     int64   // not in the queue yet
	window   float64 // bytes it may put in the queue now
	inQueue  int64   // in the queue, not through yet
	ackedAt  time.Time
	ackedSum int64 // the count acknowledged then
	dueAt    time.Time
}

type segment struct {
	r *simReq
	n int64
}

func (b *bottleneck) startNext() {
	// The first requests start one by one, as a concurrency limit grows.
	for len(b.open) < min(b.conc, 1+int(b.now.Sub(b.t0)/(150*time.Millisecond))) && b.started < b.batches {
		b.started++
		r := &simReq{id: fmt.Sprint("op-", b.started), left: b.body}
		b.reqs = append(b.reqs, r)
		b.open = append(b.open, r)
	}
}

// step moves the link on by dt.
func (b *bottleneck) step(dt time.Duration) {
	b.now = b.now.Add(dt)
	b.drain += b.rate * dt.Seconds()
	for len(b.queued) > 0 && b.drain >= 1 {
		s := &b.queued[0]
		n := min(s.n, int64(b.drain))
		s.n -= n
		b.qBytes -= n
		b.drain -= float64(n)
		s.r.inQueue -= n
		if s.n == 0 {
			if s.r.left == 0 && s.r.inQueue == 0 {
				s.r.dueAt = b.now.Add(b.fixed)
				b.due = append(b.due, s.r)
			}
			b.queued = b.queued[1:]
		}
	}
	if len(b.queued) == 0 {
		b.drain = 0 // an idle link does not save its rate up
	}
	for len(b.due) > 0 && !b.due[0].dueAt.After(b.now) {
		r := b.due[0]
		b.due = b.due[1:]
		b.lags = append(b.lags, b.now.Sub(r.ackedAt))
		b.answers = append(b.answers, sockmeter.Answer{At: b.now, Acked: r.ackedSum})
		b.settled = append(b.settled, r)
		b.open = slices.DeleteFunc(b.open, func(o *simReq) bool { return o == r })
	}
	b.startNext()
	for _, r := range b.reqs {
		r.window = min(r.window+b.perConn*dt.Seconds(), 64<<10)
	}
	const chunk = 16 << 10
	for moved := true; moved; {
		moved = false
		for _, r := range b.reqs {
			n := min(chunk, r.left, int64(r.window))
			if n == 0 || b.qBytes+n > int64(b.queue) {
				continue
			}
			r.window -= float64(n)
			r.left -= n
			r.inQueue += n
			b.qBytes += n
			b.acked += n
			b.queued = append(b.queued, segment{r, n})
			if r.left == 0 {
				r.ackedAt, r.ackedSum = b.now, b.acked
			}
			moved = true
		}
		b.reqs = slices.DeleteFunc(b.reqs, func(r *simReq) bool { return r.left == 0 })
	}
}

func (b *bottleneck) Acked() (int64, bool) { return b.acked, true }

func (b *bottleneck) InFlight() (int64, bool) {
	var n int64
	for _, r := range b.open {
		n += b.body - r.left
	}
	return n, true
}

func (b *bottleneck) Settled(string) {}
func (b *bottleneck) SettledAll()    {}

func (b *bottleneck) AnswerLag() (time.Duration, bool) {
	l := b.lags[max(len(b.lags)-4, 0):]
	if len(l) == 0 {
		return b.fixed, true // a small request's, through the empty queue
	}
	l = slices.Sorted(slices.Values(l))
	return (l[(len(l)-1)/2] + l[len(l)/2]) / 2, true
}

func (b *bottleneck) Answers() []sockmeter.Answer {
	return slices.Clone(b.answers) // fewer than sockmeter keeps
}

// On a slow link behind a deep queue (5 Mbit/s, a queue of twice the
// bandwidth-delay product at 700 ms round trip, eight 280 kB batches in
// flight), the last batches' answers come sooner after their bytes were
// acknowledged than the earlier ones' did: with no batch left to start,
// the queue is not kept full and drains. From a quarter done on until
// half a second before the last answer, the ETA is within a fifth of the
// time really left (the product's target); the answers' lags it logs
// show what an ETA from the median lag would have added.
func TestTheETAFollowsTheQueueDrainingAtTheEnd(t *testing.T) {
	t.Parallel()
	const tiles, size, perBatch = 304, 16 << 10, 16
	body := int64(perBatch * (size + wireOverheadPerTile))
	b := &bottleneck{rate: 625_000, queue: 875_000, fixed: 720 * time.Millisecond, conc: 8, perConn: 250_000,
		batches: tiles / perBatch, body: body, now: time.Unix(1_700_000_000, 0)}
	b.t0 = b.now
	p := newProgress("F", tiles, tiles*size, nil, true, zerolog.Nop(), nil, time.Second, metricsfile.New(), func() time.Time { return b.now })
	sent := unlimitedSent(t)
	p.countWire(sent, b)
	type look struct {
		at   time.Time
		done int64
		eta  time.Duration
		ok   bool
	}
	var looks []look
	const dt = 5 * time.Millisecond
	for i := 1; b.started < b.batches || len(b.open) > 0; i++ {
		before := b.started
		b.step(dt)
		sent.n.Add(int64(b.started-before) * body)
		for _, r := range b.settled {
			p.batch(uploader.BatchProgress{OpID: r.id, Tiles: perBatch, Bytes: perBatch * size, Uploaded: perBatch})
		}
		b.settled = b.settled[:0]
		if i%50 == 0 { // every 250 ms
			p.lookDelivered()
			eta, ok := p.eta()
			looks = append(looks, look{b.now, p.bytes.Load(), eta, ok})
		}
	}
	end := b.now
	worst := 0.0
	for _, l := range looks {
		left := end.Sub(l.at)
		if l.done*4 < tiles*size || left < 500*time.Millisecond {
			continue
		}
		if !l.ok {
			t.Fatalf("no ETA %s before the end, %d%% done", left, l.done*100/(tiles*size))
		}
		worst = max(worst, math.Abs(l.eta.Seconds()/left.Seconds()-1))
		if math.Abs(l.eta.Seconds()/left.Seconds()-1) > 0.2 {
			t.Errorf("ETA %s with %s really left (%d%% done)", l.eta.Round(10*time.Millisecond), left.Round(10*time.Millisecond), l.done*100/(tiles*size))
		}
	}
	t.Logf("run of %s, worst ETA error %.3f; answer lags %v", end.Sub(looks[0].at), worst, b.lags)
}

// A link that takes 1 MB/s behind a queue of 2 MB, each answer 500 ms
// after its body's last byte crossed: the batches' bytes are
// acknowledged at 1 MB/s, and, once the last batches are all that is
// left, for their last 3 s at half that, as they no longer keep the queue
// full. The queue still drains at 1 MB/s: once all is acknowledged the
// ETA is within 5% of the time left, not the slowed count's rate.
func TestOnceAllIsAcknowledgedTheETAKeepsThePathsRate(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	const tiles, size, perBatch = 100, 100_000, 10
	const rate, queue, fixed = 1e6, 2e6, 500 * time.Millisecond
	body := int64(perBatch * (size + wireOverheadPerTile))
	whole := tiles / perBatch * body
	sock := &fakeSockets{lag: queue/rate*time.Second + fixed, held: map[string]int64{}}
	p, sent := wiredProgress(t, tiles, size, &now, sock)
	sent.n.Add(whole)
	// A byte counted c crosses the link at c/rate plus the queue ahead of
	// it: the link stays busy to the end.
	crossed := func(c int64) time.Duration { return time.Duration((float64(c) + queue) / rate * float64(time.Second)) }
	start := now
	end := start.Add(crossed(whole) + fixed)
	slow := whole - 1_500_000 // the last 1.5 MB at 0.5 MB/s
	var acked float64
	answered := 0
	const step = 250 * time.Millisecond
	for now.Before(end) {
		now = now.Add(step)
		if int64(acked) < slow {
			acked += rate * step.Seconds()
		} else {
			acked += rate / 2 * step.Seconds()
		}
		acked = min(acked, float64(whole))
		for answered < tiles/perBatch && !start.Add(crossed(int64(answered+1)*body)+fixed).After(now) {
			answered++
			sock.answers = append(sock.answers, sockmeter.Answer{At: start.Add(crossed(int64(answered)*body) + fixed), Acked: int64(answered) * body})
			p.batch(uploader.BatchProgress{OpID: fmt.Sprint(answered), Tiles: perBatch, Bytes: perBatch * size, Uploaded: perBatch})
		}
		sock.acked, sock.inFlight = int64(acked), int64(acked)-int64(answered)*body
		p.lookDelivered()
		eta, ok := p.eta()
		left := end.Sub(now)
		if int64(acked) < whole || left < 500*time.Millisecond {
			continue
		}
		if !ok || math.Abs(eta.Seconds()/left.Seconds()-1) > 0.05 {
			t.Errorf("all acknowledged, %s really left: ETA %s (known %v)", left, eta.Round(10*time.Millisecond), ok)
		}
	}
}
