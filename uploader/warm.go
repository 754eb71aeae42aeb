package uploader

import (
	"context"
	"net"
	"sync"
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
// which the run's first request (GET /v1/capabilities) makes, so the
// connections for its first batches open during that request.
//
// Connections it dials and the transport has not closed count towards
// ahead's number, parked ones included, so it never holds more than the
// most it was asked for or the transport needed at once. What is parked
// when a run ends is closed (idle), as is one parked longer than
// maxParked or that its peer closed.
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
	off           bool          // the transport multiplexes (HTTP/2): one connection serves every request
	// stop ends the warm dials in progress (idle); nil when none was
	// started since.
	ctx  context.Context
	stop context.CancelFunc
}

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

func newWarmDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), now func() time.Time) *warmDialer {
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second} // net/http's default transport's
		dial = d.DialContext
	}
	return &warmDialer{dial: dial, now: now, changed: make(chan struct{})}
}

// ahead asks for n connections open by the next round trip: those open
// (in use, idle in the transport, parked) count, and the rest are dialed
// now. A nil warmDialer (a client the caller built) does nothing.
func (d *warmDialer) ahead(n int) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want = n
	d.fill()
}

// fill dials up to want; d.mu is held.
func (d *warmDialer) fill() {
	if d.addr == "" || d.off {
		return
	}
	for d.open < d.want {
		if d.stop == nil {
			d.ctx, d.stop = context.WithCancel(context.Background())
		}
		d.open++
		d.dialing++
		go d.dialAhead(d.ctx, d.network, d.addr)
	}
}

func (d *warmDialer) dialAhead(ctx context.Context, network, addr string) {
	ctx, cancel := context.WithTimeout(ctx, warmDialTimeout)
	defer cancel()
	c, err := d.dial(ctx, network, addr)
	d.mu.Lock()
	d.dialing--
	close(d.changed)
	d.changed = make(chan struct{})
	keep := err == nil && !d.off && addr == d.addr && d.want > 0
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
			stale := d.takeParked()
			d.fill()
			d.mu.Unlock()
			closeAll(stale)
			continue
		}
		if len(d.parked) > 0 {
			// The oldest first: the likeliest to have its handshake done.
			p := d.parked[0]
			d.parked = d.parked[1:]
			d.mu.Unlock()
			if d.now().Sub(p.at) < maxParked && peerOpen(p.c.Conn) {
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

// multiplexed says the transport serves every request on one connection
// (HTTP/2): nothing more is dialed ahead, and what is parked is closed.
func (d *warmDialer) multiplexed() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.off = true
	parked := d.takeParked()
	d.mu.Unlock()
	closeAll(parked)
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
