// Package sockmeter counts what the connections of a process have handed
// to the kernel and what their peers have acknowledged of it. A byte
// handed to a socket is not a byte on its way: the kernel takes megabytes
// at once, long before the link carries them, so what has left is what
// the peer acknowledged.
//
// Through RoundTripper it also follows each HTTP request: how much of its
// body the peer has acknowledged while it waits for its answer (and, for
// a request its caller holds, until the caller has recorded the answer:
// HoldAnswers), and its answer lag, from the moment the peer has
// acknowledged the last byte of its body to the first byte of its
// answer. What is acknowledged is past the link's bottleneck on a real
// path, so the lag is the rest of the way, the provider's work and the
// answer's way back. Each request is measured from its own events
// (httptrace), so the requests that share an HTTP/2 connection each have
// their own. Each answer is kept with what every connection had
// acknowledged when its body was (Answers): what was acknowledged after
// it crosses the path behind it, which tells when a run's last answer
// will come better than a lag does where the path holds a queue that
// drains at the end.
//
// Both come from the kernel's TCP_INFO (bytes acknowledged) where the
// platform has it (Linux); elsewhere they are not known.
package sockmeter

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
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

// samplePeriod is how often a request whose body is not all acknowledged
// yet is looked at: the answer lag is known to within it.
const samplePeriod = 20 * time.Millisecond

// minLagRequest is the least body a request sends for its answer to
// count in the answer lag once one such was answered: a small request's
// answer comes back through an empty queue, a batch body's through what
// the other batches keep in it.
const minLagRequest = 8 << 10

// lagAnswers is how many of the latest answers the lag is the median of:
// the lag grows while the bottleneck's queue fills, and the latest
// answers tell what it is now; a batch whose last byte waited behind the
// others' in the queue answers later than the run's last batch will,
// with none beside it, so the typical lag, not the longest, is the tail.
const lagAnswers = 4

// keptAnswers is how many of the latest answers Answers keeps: their
// times and counts tell the rate the bodies cross the path at, and a
// fast link answers small batches by the hundred a second, so that is a
// few seconds of them.
const keptAnswers = 1024

// Meter follows the connections its DialContext opens and the requests
// its RoundTripper sends. It is safe for concurrent use.
type Meter struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	now  func() time.Time

	sampling atomic.Bool // a sample is scheduled

	mu    sync.Mutex
	conns map[*conn]struct{}
	reqs  map[*request]struct{} // sent and not answered (nor failed) yet
	// holdHeader names the header whose value keys a request answered
	// 2xx in answered until Settled; "": none is held.
	holdHeader string
	// answered is the body bytes of the requests answered 2xx and not
	// settled yet, by key.
	answered map[string]int64
	// closedAcked is what the peers of the closed connections had
	// acknowledged when they were closed.
	closedAcked int64
	lags        []time.Duration // the latest answers' lags, oldest first
	// answers is the latest keptAnswers answers whose bodies'
	// acknowledgement was seen before them, with what was acknowledged
	// in all then, oldest first.
	answers []Answer
	// small is the latest lag of a request smaller than minLagRequest;
	// < 0: none.
	small time.Duration
}

// New returns a Meter that dials with dial (nil: a net.Dialer with
// net/http's default timeout and keep-alive) and reads the time from now
// (nil: time.Now): the caller's clock, since Answers' times are compared
// with the caller's.
func New(dial func(ctx context.Context, network, addr string) (net.Conn, error), now func() time.Time) *Meter {
	if dial == nil {
		d := &net.Dialer{Timeout: defaultDialTimeout, KeepAlive: defaultKeepAlive}
		dial = d.DialContext
	}
	if now == nil {
		now = time.Now
	}
	return &Meter{dial: dial, now: now, conns: map[*conn]struct{}{}, reqs: map[*request]struct{}{},
		answered: map[string]int64{}, small: -1}
}

// HoldAnswers has a request that carries header, once answered 2xx, keep
// its body counted in flight (InFlight), all of it, until Settled is
// told the header's value: the caller records an answer some time after
// it came (a database transaction, lookups), and until then what the
// body carried is neither to deliver again nor counted as settled by
// the caller. A request sent again under the same key counts from
// nothing again. It is set before the first request.
func (m *Meter) HoldAnswers(header string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holdHeader = header
}

// Settled drops the answered body held under key (HoldAnswers) from the
// count in flight: its caller has counted it settled.
func (m *Meter) Settled(key string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.answered, key)
}

// SettledAll drops every answered body held (HoldAnswers): its caller's
// work ended, and nothing it did not settle will be.
func (m *Meter) SettledAll() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.answered)
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

// Acked (of a nil Meter: not known) is the bytes the peers of every
// connection the Meter opened have acknowledged, those closed since
// included (up to their close): a count that only grows, at the rate the
// path takes them, resends and all. ok is false when the platform cannot
// tell.
func (m *Meter) Acked() (bytes int64, ok bool) {
	if m == nil || !supported {
		return 0, false
	}
	m.mu.Lock()
	bytes = m.closedAcked
	conns := make([]*conn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	for _, c := range conns {
		bytes += c.acked()
	}
	return bytes, true
}

// InFlight (of a nil Meter: not known) is the body bytes of the requests
// sent through RoundTripper and not answered yet that their peers have
// acknowledged (on each connection, the bodies written less what it has
// not had acknowledged: the latest bytes written, so theirs), and those
// of the requests answered 2xx and held until settled (HoldAnswers),
// whole. A request that ends without an answer leaves the count with its
// bytes, as one answered and not held does. ok is false when the
// platform cannot tell.
func (m *Meter) InFlight() (bytes int64, ok bool) {
	if m == nil || !supported {
		return 0, false
	}
	type onConn struct {
		written int64 // bodies written
		first   int64 // the connection's count when the earliest of them started
	}
	bodies := map[*conn]*onConn{}
	m.mu.Lock()
	for _, n := range m.answered {
		bytes += n
	}
	for r := range m.reqs {
		c, start := r.started()
		if c == nil {
			continue
		}
		// What the transport has read of the body and not written yet
		// (its copy buffer; HTTP/2 reads a stream's body ahead) is not
		// on the connection: a request is credited at most what was
		// written to it since it started.
		written := c.written.Load()
		b := bodies[c]
		if b == nil {
			b = &onConn{first: start}
			bodies[c] = b
		}
		b.written += min(r.body.Load(), max(written-start, 0))
		b.first = min(b.first, start)
	}
	m.mu.Unlock()
	for c, b := range bodies {
		acked, err := bytesAcked(c.TCPConn)
		if err != nil {
			continue // closed: its requests fail
		}
		written := c.written.Load()
		// HTTP/2's concurrent streams share the connection's count, so
		// each is credited every stream's bytes written since it
		// started; together they cannot have written more than the
		// connection took since the earliest of them started.
		body := min(b.written, max(written-b.first, 0))
		bytes += max(body-max(written-acked, 0), 0)
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
// body's last byte acknowledged to its answer's first byte: the median
// of the latest lagAnswers requests with bodies of at least
// minLagRequest bytes, or, until one such was answered, the latest
// smaller request's; ok is false until a request was answered after its
// body was acknowledged.
func (m *Meter) AnswerLag() (time.Duration, bool) {
	if m == nil {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.lags) == 0 {
		return m.small, m.small >= 0
	}
	l := slices.Sorted(slices.Values(m.lags))
	return (l[(len(l)-1)/2] + l[len(l)/2]) / 2, true
}

// Answer is an answer to a request of at least minLagRequest bytes. The
// bytes acknowledged on any connection after its body's last one cross
// the path after it: on a path kept busy, a run's last answer comes when
// they, and what is still to send, have crossed at the path's rate after
// this one came.
type Answer struct {
	// At is when its first byte came, on the Meter's clock.
	At time.Time
	// Acked is what the peers of every connection had acknowledged
	// (Acked) when its body's last byte was seen acknowledged.
	Acked int64
}

// Answers (of a nil Meter: none) is the latest keptAnswers answers to
// requests of at least minLagRequest bytes whose body was seen all
// acknowledged before the answer came, oldest first.
func (m *Meter) Answers() []Answer {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.answers[max(len(m.answers)-keptAnswers, 0):])
}

// observeLag takes a request's answer lag, and, when what was
// acknowledged in all as its body was is known (acked >= 0), the answer.
func (m *Meter) observeLag(at time.Time, d time.Duration, body, acked int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if body < minLagRequest {
		m.small = d
		return
	}
	m.lags = keepLatest(append(m.lags, d), lagAnswers)
	if acked >= 0 {
		// Trimmed to the latest keptAnswers only once twice as many are
		// held, so an answer costs no shift of the others under m.mu,
		// which every request takes; Answers reads the latest.
		m.answers = append(m.answers, Answer{At: at, Acked: acked})
		if len(m.answers) >= 2*keptAnswers {
			m.answers = keepLatest(m.answers, keptAnswers)
		}
	}
}

// keepLatest drops all but the latest n of s.
func keepLatest[T any](s []T, n int) []T {
	if len(s) > n {
		s = slices.Delete(s, 0, len(s)-n)
	}
	return s
}

// schedule makes sure a sample is coming while a request waits for its
// body to be acknowledged.
func (m *Meter) schedule() {
	if supported && m.sampling.CompareAndSwap(false, true) {
		time.AfterFunc(samplePeriod, m.sample)
	}
}

// sample notes, for each request written and not all acknowledged,
// whether it is now; it goes on while any such request is left. The flag
// is cleared before the look, so a request written during it schedules
// the next sample instead of finding one still in progress.
func (m *Meter) sample() {
	m.sampling.Store(false)
	now := m.now()
	m.mu.Lock()
	reqs := make([]*request, 0, len(m.reqs))
	for r := range m.reqs {
		reqs = append(reqs, r)
	}
	m.mu.Unlock()
	waiting := false
	var acked []*request
	for _, r := range reqs {
		w, all := r.sample(now)
		waiting = waiting || w
		if all {
			acked = append(acked, r)
		}
	}
	if len(acked) > 0 {
		total, _ := m.Acked()
		for _, r := range acked {
			r.setAckedTotal(total)
		}
	}
	if waiting {
		m.schedule()
	}
}

// RoundTripper returns rt with each request followed (a request sent
// through it on a connection the Meter did not open is not): its body's
// bytes handed over and acknowledged until its answer (InFlight), and its
// answer lag (AnswerLag). Any trace already in the request's context
// still sees every event.
func (m *Meter) RoundTripper(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{m: m, rt: rt}
}

type roundTripper struct {
	m  *Meter
	rt http.RoundTripper
}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	r := &request{m: t.m, ackedTotal: -1}
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { r.gotConn(info.Conn) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				r.wrote(t.m.now())
			}
		},
		GotFirstResponseByte: func() { r.answered(t.m.now()) },
	}
	out := req.Clone(httptrace.WithClientTrace(req.Context(), trace))
	if req.Body != nil && req.Body != http.NoBody {
		out.Body = &countedBody{ReadCloser: req.Body, n: &r.body}
	}
	if req.GetBody != nil { // net/http's own resend reads the body again
		out.GetBody = func() (io.ReadCloser, error) {
			b, err := req.GetBody()
			if err != nil || b == nil || b == http.NoBody {
				return b, err
			}
			return &countedBody{ReadCloser: b, n: &r.body}, nil
		}
	}
	t.m.mu.Lock()
	key := ""
	if t.m.holdHeader != "" {
		key = req.Header.Get(t.m.holdHeader)
	}
	if key != "" {
		delete(t.m.answered, key) // sent again: counts from nothing
	}
	t.m.reqs[r] = struct{}{}
	t.m.mu.Unlock()
	resp, err := t.rt.RoundTrip(out)
	// Answered or failed: no longer in flight, unless held until settled
	// (under the same lock, so that InFlight never misses it between).
	t.m.mu.Lock()
	delete(t.m.reqs, r)
	if key != "" && err == nil && resp.StatusCode/100 == 2 {
		if n := r.body.Load(); n > 0 {
			t.m.answered[key] = n
		}
	}
	t.m.mu.Unlock()
	return resp, err
}

// CloseIdleConnections closes rt's idle connections, where it can.
func (t roundTripper) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// countedBody counts the bytes the transport reads of a request's body.
type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// request is one request sent through the RoundTripper: its connection,
// its body's bytes read, and, once written, the connection's count of
// bytes written then (its body's end) and when the peer had acknowledged
// them.
type request struct {
	m    *Meter
	body atomic.Int64

	mu        sync.Mutex
	c         *conn     // nil: not one the Meter opened (or none yet)
	start     int64     // the connection's bytes written when the request took it
	end       int64     // the connection's bytes written when the request was; 0: not written yet
	wroteAt   time.Time // when it was written
	sampledAt time.Time // the last look, when it was not all acknowledged
	ackedAt   time.Time // when all of it was acknowledged (estimate); zero: not yet
	// ackedTotal is the Meter's Acked at the look that saw all of it
	// acknowledged; < 0: not known (not yet, or seen only with the answer).
	ackedTotal int64
	done       bool // answered
	attempted  bool // a connection was taken for it
}

// gotConn takes the request's connection: the Meter's own, under TLS or
// not. net/http may send a request again by itself on another connection
// (a reused one failed): the request then starts over there, its body
// counted from nothing (the replay, GetBody's, is counted as it is read)
// and nothing of the failed attempt's write, looks or acknowledgement
// kept, which were of the other connection.
func (r *request) gotConn(nc net.Conn) {
	c := unwrap(nc)
	r.mu.Lock()
	if r.attempted {
		r.body.Store(0)
		r.end, r.wroteAt, r.sampledAt, r.ackedAt, r.ackedTotal = 0, time.Time{}, time.Time{}, time.Time{}, -1
	}
	r.c, r.attempted = c, true
	if c != nil {
		r.start = c.written.Load()
	}
	r.mu.Unlock()
}

// unwrap finds the meter's connection under the layers a transport or a
// dialer put over it (TLS, a dialer's own bookkeeping): each layer that
// has one says what it wraps through a NetConn method, as *tls.Conn does.
func unwrap(nc net.Conn) *conn {
	for nc != nil {
		if c, ok := nc.(*conn); ok {
			return c
		}
		w, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = w.NetConn()
	}
	return nil
}

// started is the request's connection and the connection's count of
// bytes written when the request took it.
func (r *request) started() (*conn, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c, r.start
}

// wrote notes the request's end on its connection: what was written to
// it by then, its body's last byte included.
func (r *request) wrote(now time.Time) {
	r.mu.Lock()
	if r.c == nil || r.done {
		r.mu.Unlock()
		return
	}
	r.end, r.wroteAt = r.c.written.Load(), now
	r.mu.Unlock()
	r.m.schedule()
}

// sample looks whether the request is all acknowledged and reports
// whether it still waits for that, or is seen all acknowledged now.
func (r *request) sample(now time.Time) (waiting, acked bool) {
	r.mu.Lock()
	c, end := r.c, r.end
	pending := c != nil && end > 0 && r.ackedAt.IsZero() && !r.done
	r.mu.Unlock()
	if !pending {
		return false, false
	}
	n, err := bytesAcked(c.TCPConn)
	if err != nil {
		return false, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.c != c { // answered, or sent again elsewhere, meanwhile
		return false, false
	}
	if n >= end {
		r.ackedAt = r.lastLook().Add(now.Sub(r.lastLook()) / 2) // between the two looks
		return false, true
	}
	r.sampledAt = now
	return true, false
}

// setAckedTotal notes the Meter's Acked at the look that saw the request
// all acknowledged, unless it was answered or started over meanwhile.
func (r *request) setAckedTotal(total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done && !r.ackedAt.IsZero() {
		r.ackedTotal = total
	}
}

// lastLook is when the request was last seen not all acknowledged: the
// last sample, or its write.
func (r *request) lastLook() time.Time {
	if r.sampledAt.After(r.wroteAt) {
		return r.sampledAt
	}
	return r.wroteAt
}

// answered takes the request's answer lag, if its body was all
// acknowledged before the answer came (an answer before that, to a
// request refused early, is not a lag).
//
// net/http reports the write from its own goroutine, after flushing: a
// quick answer can come first. The request's end is then all that was
// written to the connection (one request at a time on HTTP/1; on HTTP/2
// another stream's bytes may be among it, and then it is not all
// acknowledged and there is no lag), acknowledged at the earliest with
// the last write: the lag is at most the time since.
//
// The lag is handed to the Meter after the request's lock is let go:
// InFlight holds the Meter's while it takes each request's.
func (r *request) answered(now time.Time) {
	if lag, acked, ok := r.lag(now); ok {
		r.m.observeLag(now, lag, r.body.Load(), acked)
	}
}

// lag marks the request answered at now and returns its answer lag and
// the Meter's Acked when a look saw its body all acknowledged (< 0: no
// look saw it before the answer); ok is false when it has no lag
// (answered before all of it was acknowledged, or answered already).
func (r *request) lag(now time.Time) (lag time.Duration, acked int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.c == nil {
		return 0, -1, false
	}
	r.done = true
	end, ackedAt, acked := r.end, r.ackedAt, r.ackedTotal
	if end == 0 {
		end, r.wroteAt = r.c.written.Load(), time.Unix(0, r.c.lastWrite.Load())
	}
	if ackedAt.IsZero() {
		n, err := bytesAcked(r.c.TCPConn)
		if err != nil || end == 0 || n < end {
			return 0, -1, false
		}
		last := r.lastLook() // acknowledged since then
		ackedAt = last.Add(now.Sub(last) / 2)
	}
	return max(now.Sub(ackedAt), 0), acked, true
}

// conn counts what is written to it.
type conn struct {
	*net.TCPConn
	m       *Meter
	written atomic.Int64
	// lastWrite is when the last write returned (Unix nanoseconds).
	lastWrite atomic.Int64
	once      sync.Once
	// last is the peer's acknowledged bytes when last asked, for after
	// the close.
	last atomic.Int64
}

func (c *conn) Write(p []byte) (int, error) {
	n, err := c.TCPConn.Write(p)
	if n > 0 {
		c.written.Add(int64(n))
		c.lastWrite.Store(c.m.now().UnixNano())
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

// acked is the bytes the peer has acknowledged, or, once the connection
// is closed, what it had when last asked.
func (c *conn) acked() int64 {
	if n, err := bytesAcked(c.TCPConn); err == nil {
		c.last.Store(n)
		return n
	}
	return c.last.Load()
}

func (c *conn) Close() error {
	c.once.Do(func() {
		acked := c.acked()
		c.m.mu.Lock()
		delete(c.m.conns, c)
		c.m.closedAcked += acked
		c.m.mu.Unlock()
	})
	return c.TCPConn.Close()
}
