// Package linkemu emulates one network link in process: a single shared
// bottleneck with a rate each way, a one-way propagation delay and a
// bounded queue, exposed as TCP proxies on 127.0.0.1 so that real
// processes (tilectl, a naive client, a provider) talk through it.
//
// Every connection through a Link queues on the same serializer in each
// direction, as packets do at the bottleneck router of a real ground link:
// two connections together get the link's rate, not twice it. A chunk
// read from one side leaves the queue at max(now, busyUntil) + size/rate
// and reaches the other side Delay later. When the queue is full the
// proxy stops reading from the sender, so the sender's own TCP stack
// pushes back, as it would into a full bottleneck; nothing is dropped.
//
// The proxy's accepted connections have a small receive buffer
// (proxyReceiveBuffer), set on the listening socket so that the first
// window is small too. A kernel acknowledges bytes when they land in the
// receive buffer, and on loopback Linux grows that buffer to megabytes a
// connection: the sender would see megabytes acknowledged that the
// bottleneck has not taken, and hand over megabytes more, where on a real
// path its bytes wait in its own send buffer, unacknowledged, until the
// bottleneck's queue takes them. With the small buffer, what the queue
// has not taken waits on the sender's side, as it does there; the queue
// itself is the one part of the path the sender sees acknowledged early.
//
// What it does not model: loss, reordering, and TCP's congestion control
// between the sender and the bottleneck (a sender fills the queue as fast
// as the queue takes data, whatever its round-trip time). The application's
// round trips, a request waiting for its response, are what the delay
// costs, and those are what a batch uploader has to hide.
//
// The emulator runs on the wall clock: it exists to make real time pass the
// way a real link makes it pass.
package linkemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config describes a Link. The zero value is a link with no rate limit, no
// delay and the minimum queue.
type Config struct {
	// UpRate and DownRate are the bottleneck's rates in bits per second:
	// Up carries bytes from the proxy's clients to its target, Down the
	// answers. 0 means no rate limit that way. Default 0.
	UpRate, DownRate int64
	// Delay is the one-way propagation delay; a round trip costs twice
	// it. Default 0.
	Delay time.Duration
	// QueueBytes bounds the bytes waiting at the bottleneck, each way.
	// 0 (the default) sizes the queue at twice the bandwidth-delay product
	// (rate × round trip) of the rate in force, at least MinQueueBytes, and
	// resizes it when SetRate changes the rate.
	QueueBytes int
	// Handshake makes a new connection pay TCP's handshake: the client's
	// first bytes cannot leave before one round trip after the connection
	// is accepted. Default off: the first bytes leave at once.
	Handshake bool
}

// MinQueueBytes is the smallest default queue: enough for a few chunks even
// on a link whose bandwidth-delay product is tiny.
const MinQueueBytes = 256 << 10

// chunkBytes is the most the proxy reads at once, and so the unit the
// serializer interleaves connections by: at 5 Mbit/s a chunk is 26 ms on
// the wire, at 200 Mbit/s 0.65 ms.
const chunkBytes = 16 << 10

// proxyReceiveBuffer is the SO_RCVBUF of the proxy's accepted
// connections: a few kilobytes (Linux doubles it), about a chunk, so
// that little the bottleneck has not taken is acknowledged to the sender.
const proxyReceiveBuffer = 8 << 10

// Link is one emulated bottleneck shared by every proxy Listen opens on it.
// It is safe for concurrent use.
type Link struct {
	delay     time.Duration
	handshake bool
	up, down  *serializer

	conns atomic.Int64 // connections accepted

	mu      sync.Mutex
	closed  bool
	proxies map[*Proxy]struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

// New returns a Link with cfg's rates, delay and queue.
func New(cfg Config) (*Link, error) {
	if cfg.UpRate < 0 || cfg.DownRate < 0 {
		return nil, fmt.Errorf("link rates must be 0 (unlimited) or positive, got up %d and down %d bits/s", cfg.UpRate, cfg.DownRate)
	}
	if cfg.Delay < 0 {
		return nil, fmt.Errorf("link delay must not be negative, got %v", cfg.Delay)
	}
	if cfg.QueueBytes < 0 {
		return nil, fmt.Errorf("link queue must be 0 (default) or positive, got %d bytes", cfg.QueueBytes)
	}
	l := &Link{
		delay:     cfg.Delay,
		handshake: cfg.Handshake,
		up:        newSerializer(cfg.UpRate, cfg.Delay, cfg.QueueBytes),
		down:      newSerializer(cfg.DownRate, cfg.Delay, cfg.QueueBytes),
		proxies:   map[*Proxy]struct{}{},
		done:      make(chan struct{}),
	}
	l.wg.Add(2)
	go func() { defer l.wg.Done(); l.up.run(l.done) }()
	go func() { defer l.wg.Done(); l.down.run(l.done) }()
	return l, nil
}

// SetRate changes the rate both ways, in bits per second (0: no limit).
// The chunk on the wire finishes at the old rate; the next one, whichever
// connection it came from, leaves at the new rate.
func (l *Link) SetRate(bitsPerSecond int64) { l.SetRates(bitsPerSecond, bitsPerSecond) }

// SetRates changes the up and down rates separately (bits per second, 0: no
// limit).
func (l *Link) SetRates(up, down int64) {
	l.up.setRate(up)
	l.down.setRate(down)
}

// Stats counts what a Link has carried.
type Stats struct {
	UpBytes, DownBytes int64 // bytes that have left the queue each way
	Conns              int64 // connections accepted
}

// Stats reports what the link has carried so far.
func (l *Link) Stats() Stats {
	return Stats{UpBytes: l.up.sent.Load(), DownBytes: l.down.sent.Load(), Conns: l.conns.Load()}
}

// ErrClosed is returned by Listen on a closed Link.
var ErrClosed = errors.New("linkemu: link closed")

// Close closes every proxy and connection on the link and waits for all of
// its goroutines to end.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.wg.Wait()
		return nil
	}
	l.closed = true
	close(l.done)
	ps := make([]*Proxy, 0, len(l.proxies))
	for p := range l.proxies {
		ps = append(ps, p)
	}
	l.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
	l.wg.Wait()
	return nil
}

// Listen opens a proxy on 127.0.0.1 (an ephemeral port) that forwards each
// connection it accepts to target through the link: the accepted side is
// "up", target's answers are "down".
func (l *Link) Listen(target string) (*Proxy, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = setReceiveBuffer(fd, proxyReceiveBuffer) }); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the link proxy to %s: %w", target, err)
	}
	p := &Proxy{link: l, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ln.Close()
		return nil, ErrClosed
	}
	l.proxies[p] = struct{}{}
	l.wg.Add(1)
	l.mu.Unlock()
	go p.serve()
	return p, nil
}

// Proxy is one listening end of a Link.
type Proxy struct {
	link   *Link
	ln     net.Listener
	target string

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

// Addr is the proxy's host:port on 127.0.0.1.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's address as an http URL, for HTTP targets.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Close stops accepting and closes the proxy's connections. Link.Close
// closes every proxy; this closes one.
func (p *Proxy) Close() error {
	p.close()
	p.link.mu.Lock()
	delete(p.link.proxies, p)
	p.link.mu.Unlock()
	return nil
}

func (p *Proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

// track registers c so Close can close it; it reports false (and closes c)
// once the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) serve() {
	defer p.link.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		accepted := time.Now()
		p.link.conns.Add(1)
		if !p.track(c) {
			return
		}
		p.link.wg.Add(1)
		go p.pair(c, accepted)
	}
}

// pair dials the target for the accepted client c and pumps both ways
// through the link until both directions have ended.
func (p *Proxy) pair(client net.Conn, accepted time.Time) {
	defer p.link.wg.Done()
	defer p.untrack(client)
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	defer server.Close()

	l := p.link
	var notBefore time.Time
	if l.handshake {
		notBefore = accepted.Add(2 * l.delay)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	// A failed write on either side tears the pair down: the other side
	// sees its connection close, as it would see a reset.
	teardown := func() { client.Close(); server.Close() }
	go func() { defer wg.Done(); pump(l, l.up, client, server, notBefore, teardown) }()
	go func() { defer wg.Done(); pump(l, l.down, server, client, time.Time{}, teardown) }()
	wg.Wait()
}
