package uploader

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// warmDialer opens connections to the provider ahead of the batches that
// will need them. A connection costs a round trip before its first byte
// goes (TCP's handshake); a limit on batches in flight that grows opens
// one per new slot, and on a long link those handshakes, not the link,
// would pace the run's start. Told how many connections the next round
// trip may use (ahead), it dials the difference at once and parks what it
// dialed; the transport's next dial takes a parked connection instead of
// dialing, or waits for one still being dialed, which is no later than a
// dial of its own.
//
// The address is the one the transport dials (the provider's, or its
// proxy's): nothing is dialed ahead before the transport's first dial,
// which the run's first request (GET /v1/capabilities) makes. Over plain
// HTTP (HTTP/1.1: net/http does not speak HTTP/2 in the clear) the
// connections for the run's first batches open during that request, on a
// link whose first answer does not come within warmHold of the first dial
// (on a shorter one, none is dialed ahead). Over
// HTTPS the provider may choose HTTP/2 (ALPN), where one connection
// carries every request and connections dialed ahead would only be
// closed unused: nothing is dialed ahead until an answer shows the
// protocol (the sender tells: http1, multiplexed), and then, for
// HTTP/1.x, what ahead last asked for.
//
// A link whose handshake costs next to nothing (loopback, a LAN) gains
// nothing from connections opened ahead, and pays for each one it does
// not use, at both ends. The dialer tells one from the first answer: an
// answer (over HTTP/1.x) within warmHold of the transport's first dial
// is a short link, where nothing is dialed ahead for the rest of the
// client's life and the transport dials as batches need connections.
// Until then it holds its dials ahead for warmHold from the transport's
// first dial: on a link where the answer takes longer, they start then,
// still well within the first request's round trip.
//
// Connections it dials and the transport has not closed count towards
// ahead's number, parked ones included, so it never holds more than the
// most it was asked for or the transport needed at once. What is parked
// when a run ends is closed (idle); one parked longer than maxParked or
// that its peer closed is closed and replaced when ahead is next asked,
// and never handed to the transport.
type warmDialer struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	now  func() time.Time

	mu sync.Mutex
	// network and addr are what the transport last dialed: warm
	// connections go there. Empty until its first dial.
	network, addr string
	want          int // the connections ahead asked for last
	open          int // dialed or being dialed, not closed; parked ones included
	dialing       int // warm dials not finished
	waiting       int // transport dials waiting for one of them
	parked        []parkedConn
	changed       chan struct{} // closed and replaced when a warm dial ends
	// proto is what the provider's answers came over, as far as it
	// matters here: written under mu, read without it by http1, which
	// the sender calls on every answer and which changes something only
	// while the protocol is unknown.
	proto atomic.Int32
	// stop ends the warm dials in progress (idle); nil when none was
	// started since.
	ctx  context.Context
	stop context.CancelFunc
	// hold is warmHold; after arms its timer (time.AfterFunc; tests).
	hold  time.Duration
	after func(d time.Duration, f func()) (stop func() bool)
	// firstDial is when the transport first dialed (zero before); link
	// is what the first answer told of the link since, read without mu
	// by http1 like proto.
	firstDial time.Time
	stopHold  func() bool // the hold's timer, once armed
	link      atomic.Int32
}

// linkKind is what the dialer knows of the link's handshake cost.
type linkKind = int32

const (
	// linkUnknown: no answer yet, and warmHold has not passed since the
	// transport's first dial: nothing is dialed ahead yet.
	linkUnknown linkKind = iota
	// linkShort: the first answer came within warmHold of the first
	// dial: nothing is dialed ahead.
	linkShort
	// linkLong: it did not: connections are dialed ahead.
	linkLong
)

// warmHold is how soon after the transport's first dial an answer marks
// a link whose handshakes are not worth dialing ahead: a round trip
// under half of it, so a connection a batch opens for itself costs it
// that much once.
const warmHold = 5 * time.Millisecond

// protocol is what a provider's answers come over, as the dialer sees it.
type protocol = int32

const (
	// protoOnePerConn: HTTP/1.x, a request at a time per connection;
	// connections are dialed ahead.
	protoOnePerConn protocol = iota
	// protoUnknown: no answer yet from a provider that may choose HTTP/2
	// (HTTPS); nothing is dialed ahead.
	protoUnknown
	// protoMultiplexed: HTTP/2, one connection serves every request;
	// nothing is dialed ahead.
	protoMultiplexed
)

type parkedConn struct {
	c  *warmConn
	at time.Time
}

// maxParked is how long a connection dialed ahead waits for a request
// before it is closed instead of used: a server may close a connection
// that sent nothing for a while, and a request written into one it closed
// fails.
const maxParked = 20 * time.Second

// warmDialTimeout bounds one dial ahead.
const warmDialTimeout = 30 * time.Second

// newWarmDialer dials ahead once the link shows itself long (warmHold
// after the first dial with no answer yet), over plain HTTP at once then;
// awaitProtocol holds it until an answer shows the protocol.
func newWarmDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), now func() time.Time) *warmDialer {
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second} // net/http's default transport's
		dial = d.DialContext
	}
	return &warmDialer{dial: dial, now: now, changed: make(chan struct{}), hold: warmHold,
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
}

// awaitProtocol holds the dials ahead until an answer shows the
// protocol (http1 or multiplexed): for a provider over HTTPS.
func (d *warmDialer) awaitProtocol() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.proto.CompareAndSwap(protoOnePerConn, protoUnknown)
}

// ahead asks for n connections open by the next round trip: those open
// (in use, idle in the transport, parked) count, and the rest are dialed
// now (once the protocol is known to be HTTP/1.x). A nil warmDialer (a
// client the caller built) does nothing.
func (d *warmDialer) ahead(n int) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.want = n
	stale := d.fill()
	d.mu.Unlock()
	closeAll(stale)
}

// fill closes the parked connections that are stale (sweep) and dials up
// to want; d.mu is held. The caller closes what it returns once it has
// released d.mu.
func (d *warmDialer) fill() []parkedConn {
	stale := d.sweep()
	if d.addr == "" || d.proto.Load() != protoOnePerConn || d.link.Load() != linkLong {
		return stale
	}
	for d.open < d.want {
		if d.stop == nil {
			d.ctx, d.stop = context.WithCancel(context.Background())
		}
		d.open++
		d.dialing++
		go d.dialAhead(d.ctx, d.network, d.addr)
	}
	return stale
}

// sweep takes the parked connections past maxParked or that their peer
// closed out of the parking and the count, so fill replaces them; d.mu is
// held. The parking holds at most what ahead asked for, and a look into a
// connection is one system call that does not wait.
func (d *warmDialer) sweep() []parkedConn {
	var stale []parkedConn
	kept := d.parked[:0]
	for _, p := range d.parked {
		if d.fresh(p) {
			kept = append(kept, p)
			continue
		}
		stale = append(stale, p)
		p.c.uncount()
	}
	clear(d.parked[len(kept):])
	d.parked = kept
	return stale
}

// fresh says p may still carry a request: parked for less than maxParked
// and not closed by its peer.
func (d *warmDialer) fresh(p parkedConn) bool {
	return d.now().Sub(p.at) < maxParked && peerOpen(p.c.Conn)
}

func (d *warmDialer) dialAhead(ctx context.Context, network, addr string) {
	ctx, cancel := context.WithTimeout(ctx, warmDialTimeout)
	defer cancel()
	c, err := d.dial(ctx, network, addr)
	d.mu.Lock()
	d.dialing--
	close(d.changed)
	d.changed = make(chan struct{})
	keep := err == nil && d.proto.Load() == protoOnePerConn && addr == d.addr && d.want > 0
	if keep {
		d.parked = append(d.parked, parkedConn{c: &warmConn{Conn: c, d: d}, at: d.now()})
	} else {
		// A failed dial is not retried here: the transport's own dial
		// reports what is wrong with the address.
		d.open--
	}
	d.mu.Unlock()
	if err == nil && !keep {
		c.Close()
	}
}

// DialContext is the transport's dial: a parked connection to addr if
// one is there and open, one being dialed ahead when there is one no
// other dial waits for, or a new one.
func (d *warmDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	for {
		d.mu.Lock()
		if network != d.network || addr != d.addr {
			d.network, d.addr = network, addr
			if d.firstDial.IsZero() {
				d.firstDial = d.now()
				d.stopHold = d.after(d.hold, d.holdOver)
			}
			stale := append(d.takeParked(), d.fill()...)
			d.mu.Unlock()
			closeAll(stale)
			continue
		}
		if len(d.parked) > 0 {
			// The oldest first: the likeliest to have its handshake done.
			p := d.parked[0]
			d.parked = d.parked[1:]
			d.mu.Unlock()
			if d.fresh(p) {
				return p.c, nil
			}
			p.c.Close()
			continue
		}
		if d.dialing > d.waiting {
			d.waiting++
			ch := d.changed
			d.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
			}
			d.mu.Lock()
			d.waiting--
			d.mu.Unlock()
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			continue
		}
		d.open++
		d.mu.Unlock()
		c, err := d.dial(ctx, network, addr)
		if err != nil {
			d.mu.Lock()
			d.open--
			d.mu.Unlock()
			return nil, err
		}
		return &warmConn{Conn: c, d: d}, nil
	}
}

// holdOver is the end of warmHold after the transport's first dial with
// no answer yet: the link is long, and what ahead last asked for is
// dialed.
func (d *warmDialer) holdOver() {
	d.mu.Lock()
	if !d.link.CompareAndSwap(linkUnknown, linkLong) {
		d.mu.Unlock()
		return
	}
	stale := d.fill()
	d.mu.Unlock()
	closeAll(stale)
}

// answered tells the link's kind from the first answer, if warmHold has
// not told it already; d.mu is held.
func (d *warmDialer) answered() {
	if d.link.Load() != linkUnknown || d.firstDial.IsZero() {
		return
	}
	if d.now().Sub(d.firstDial) < d.hold {
		d.link.Store(linkShort)
	} else {
		d.link.Store(linkLong)
	}
	d.stopHold()
}

// multiplexed says the transport serves every request on one connection
// (HTTP/2): nothing more is dialed ahead, and what is parked is closed.
func (d *warmDialer) multiplexed() {
	if d == nil {
		return
	}
	if d.proto.Load() == protoMultiplexed {
		return // known already: every answer tells, the first one matters
	}
	d.mu.Lock()
	d.proto.Store(protoMultiplexed)
	parked := d.takeParked()
	d.mu.Unlock()
	closeAll(parked)
}

// http1 says an answer came over HTTP/1.x, a request at a time per
// connection: a dialer waiting for the protocol dials what ahead last
// asked for. An answer after one over HTTP/2 changes nothing: the
// transport keeps its multiplexed connection.
func (d *warmDialer) http1() {
	if d == nil {
		return
	}
	if d.proto.Load() != protoUnknown && d.link.Load() != linkUnknown {
		return // known already: every answer tells, the first one matters
	}
	d.mu.Lock()
	d.answered()
	if !d.proto.CompareAndSwap(protoUnknown, protoOnePerConn) && d.link.Load() != linkLong {
		d.mu.Unlock()
		return
	}
	stale := d.fill()
	d.mu.Unlock()
	closeAll(stale)
}

// idle closes the parked connections and ends the dials ahead still in
// progress, at a run's end: the next run asks again. Connections in the
// transport's pool stay there.
func (d *warmDialer) idle() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.want = 0
	if d.stop != nil {
		d.stop()
		d.ctx, d.stop = nil, nil
	}
	parked := d.takeParked()
	d.mu.Unlock()
	closeAll(parked)
}

// takeParked empties the parking; d.mu is held. The caller closes what
// it took once it has released d.mu (closing takes it).
func (d *warmDialer) takeParked() []parkedConn {
	parked := d.parked
	d.parked = nil
	return parked
}

func closeAll(parked []parkedConn) {
	for _, p := range parked {
		p.c.Close()
	}
}

// counts is what the dialer holds: connections open (parked included)
// and parked, for tests.
func (d *warmDialer) counts() (open, parked int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.open, len(d.parked)
}

// warmConn is a connection the dialer counts until it is closed.
type warmConn struct {
	net.Conn
	d    *warmDialer
	once sync.Once
}

// NetConn is the connection under the count, for those that look through
// the layers over a connection (the acknowledged-bytes meter does).
func (c *warmConn) NetConn() net.Conn { return c.Conn }

func (c *warmConn) Close() error {
	c.once.Do(func() {
		c.d.mu.Lock()
		c.d.open--
		c.d.mu.Unlock()
	})
	return c.Conn.Close()
}

// uncount takes c out of the count before it is closed; c.d.mu is held.
// It shares Close's once: a Close of c on another goroutine at the same
// time would wait for c.d.mu here, which only parked connections (never
// yet handed out, so closed by nobody else) avoid.
func (c *warmConn) uncount() {
	c.once.Do(func() { c.d.open-- })
}
