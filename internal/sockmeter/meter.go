// Package sockmeter counts what the connections of a process have handed
// to the kernel and not yet had acknowledged by the peer: the bytes still
// in their send buffers. A byte handed to a socket is not a byte on its
// way: the kernel takes megabytes at once, long before the link carries
// them, so what has left is what was handed over less this backlog.
//
// It also measures the answer lag: from the moment the peer has
// acknowledged the last byte of a request to the first byte of its
// answer. What is acknowledged is past the link's bottleneck on a real
// path, so the lag is the rest of the way, the provider's work and the
// answer's way back: the time the last request of a run still takes once
// its bytes are acknowledged.
//
// Both come from the kernel's TCP_INFO (bytes acknowledged) where the
// platform has it (Linux); elsewhere they are not known.
package sockmeter

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The default dialer's settings, net/http's DefaultTransport's.
const (
	defaultDialTimeout = 30 * time.Second
	defaultKeepAlive   = 30 * time.Second
)

// samplePeriod is how often a connection whose request is not all
// acknowledged yet is asked how much is: the answer lag is known to
// within it.
const samplePeriod = 20 * time.Millisecond

// minLagRequest is the least a request writes for its answer to count in
// the answer lag once one such was answered: a small request's answer
// comes back through an empty queue, a batch body's through what the
// other batches keep in it.
const minLagRequest = 8 << 10

// lagAnswers is how many of the latest answers the lag is the longest of:
// the lag grows while the bottleneck's queue fills, and the latest
// answers tell what it is now.
const lagAnswers = 4

// Meter follows the connections its DialContext opens. It is safe for
// concurrent use.
type Meter struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	now  func() time.Time

	sampling atomic.Bool // a sample is scheduled

	mu    sync.Mutex
	conns map[*conn]struct{}
	lags  []time.Duration // the latest answers' lags, oldest first
	// small is the latest lag of a request smaller than minLagRequest;
	// < 0: none.
	small time.Duration
}

// New returns a Meter that dials with dial (nil: a net.Dialer with
// net/http's default timeout and keep-alive).
func New(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Meter {
	if dial == nil {
		d := &net.Dialer{Timeout: defaultDialTimeout, KeepAlive: defaultKeepAlive}
		dial = d.DialContext
	}
	return &Meter{dial: dial, now: time.Now, conns: map[*conn]struct{}{}, small: -1}
}

// DialContext dials addr and follows the connection until it is closed;
// it fits http.Transport.DialContext.
func (m *Meter) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := m.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil // not TCP: nothing to ask the kernel
	}
	w := &conn{TCPConn: tc, m: m}
	m.mu.Lock()
	m.conns[w] = struct{}{}
	m.mu.Unlock()
	return w, nil
}

func (m *Meter) open() []*conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	conns := make([]*conn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	return conns
}

// Backlog (of a nil Meter: not known) is the bytes written to the open
// connections that their peers have not acknowledged yet (in the send
// buffers, or on the way); ok is false when the platform cannot tell.
func (m *Meter) Backlog() (bytes int64, ok bool) {
	if m == nil || !supported {
		return 0, false
	}
	for _, c := range m.open() {
		written := c.written.Load()
		acked, err := bytesAcked(c.TCPConn)
		if err != nil {
			continue // closed meanwhile: nothing of it waits any more
		}
		bytes += max(written-acked, 0)
	}
	return bytes, true
}

// Written is the bytes written to the open connections.
func (m *Meter) Written() int64 {
	var n int64
	for _, c := range m.open() {
		n += c.written.Load()
	}
	return n
}

// AnswerLag (of a nil Meter: not known) is the time from a request's
// last byte acknowledged to its answer's first byte: the longest of the
// latest lagAnswers requests of at least minLagRequest bytes, or, until
// one such was answered, the latest smaller request's; ok is false until
// a request was answered.
func (m *Meter) AnswerLag() (time.Duration, bool) {
	if m == nil {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.lags) == 0 {
		return m.small, m.small >= 0
	}
	return slices.Max(m.lags), true
}

func (m *Meter) observeLag(d time.Duration, request int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if request < minLagRequest {
		m.small = d
		return
	}
	m.lags = append(m.lags, d)
	if len(m.lags) > lagAnswers {
		m.lags = slices.Delete(m.lags, 0, len(m.lags)-lagAnswers)
	}
}

// schedule makes sure a sample is coming while a request waits to be
// acknowledged.
func (m *Meter) schedule() {
	if supported && m.sampling.CompareAndSwap(false, true) {
		time.AfterFunc(samplePeriod, m.sample)
	}
}

// sample notes, for each connection with a request not all acknowledged,
// whether it is now; it goes on while any such connection is left.
// The flag is cleared before the look, so a write during it schedules the
// next sample instead of finding one still in progress.
func (m *Meter) sample() {
	m.sampling.Store(false)
	now := m.now()
	waiting := false
	for _, c := range m.open() {
		if c.sample(now) {
			waiting = true
		}
	}
	if waiting {
		m.schedule()
	}
}

// conn counts what is written to it and follows its requests: the bytes
// written since its last answer, and when the peer had acknowledged all
// of them.
type conn struct {
	*net.TCPConn
	m       *Meter
	written atomic.Int64
	once    sync.Once

	mu        sync.Mutex
	request   int64     // bytes written since the last answer
	ackedAt   time.Time // when all of them were acknowledged (estimate); zero: not yet
	sampledAt time.Time // the last look at what is acknowledged
	wroteAt   time.Time // the last write
}

func (c *conn) Write(p []byte) (int, error) {
	n, err := c.TCPConn.Write(p)
	if n > 0 {
		c.written.Add(int64(n))
		c.mu.Lock()
		c.request += int64(n)
		c.ackedAt, c.wroteAt = time.Time{}, c.m.now()
		c.mu.Unlock()
		c.m.schedule()
	}
	return n, err
}

// ReadFrom keeps the count when io.Copy writes to the connection
// (net/http copies request bodies so): the TCPConn's own would write
// around Write.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{c}, r)
}

type writerOnly struct{ io.Writer }

// Read takes an answer's first byte as the end of the request before it.
func (c *conn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	if n > 0 {
		c.answered(c.m.now())
	}
	return n, err
}

func (c *conn) answered(now time.Time) {
	c.mu.Lock()
	request, ackedAt, sampledAt := c.request, c.ackedAt, c.sampledAt
	c.request, c.ackedAt = 0, time.Time{}
	c.mu.Unlock()
	if request == 0 {
		return // more of the same answer
	}
	if ackedAt.IsZero() {
		// Acknowledged since the last look, or not at all (an answer
		// before the whole request: not a lag).
		acked, err := bytesAcked(c.TCPConn)
		if err != nil || acked < c.written.Load() {
			return
		}
		ackedAt = sampledAt
		if now.Sub(sampledAt) > samplePeriod {
			ackedAt = now.Add(-samplePeriod / 2)
		}
	}
	c.m.observeLag(max(now.Sub(ackedAt), 0), request)
}

// sample looks whether the request in progress is all acknowledged and
// reports whether it still waits for that.
func (c *conn) sample(now time.Time) (waiting bool) {
	c.mu.Lock()
	pending := c.request > 0 && c.ackedAt.IsZero()
	c.mu.Unlock()
	if !pending {
		return false
	}
	written := c.written.Load()
	acked, err := bytesAcked(c.TCPConn)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.sampledAt // the last look, when it was not all acknowledged yet
	if c.wroteAt.After(before) {
		before = c.wroteAt
	}
	c.sampledAt = now
	if acked >= written && c.written.Load() == written && c.request > 0 {
		c.ackedAt = before.Add(now.Sub(before) / 2) // between the two looks
		return false
	}
	return c.request > 0
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.m.mu.Lock()
		delete(c.m.conns, c)
		c.m.mu.Unlock()
	})
	return c.TCPConn.Close()
}
