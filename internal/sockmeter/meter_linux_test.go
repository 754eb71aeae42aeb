package sockmeter

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// serve accepts one connection and hands it to handle.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		handle(c)
	}()
	return ln.Addr().String()
}

// meteredClient is a client on a clone of Go's default transport that
// dials through m and goes through m's RoundTripper, as the uploader's
// default one does; tweak, if set, changes the transport first.
func meteredClient(t *testing.T, m *Meter, tweak func(*http.Transport)) *http.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = m.DialContext
	if tweak != nil {
		tweak(tr)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: m.RoundTripper(tr)}
}

// writeAll writes b in 16 KiB pieces, as net/http does.
func writeAll(c net.Conn, b []byte) {
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		if _, err := c.Write(b[:n]); err != nil {
			return
		}
		b = b[n:]
	}
}

// Bytes handed to a socket whose peer does not read are in the backlog,
// beyond what the peer's receive buffer took; once it reads them all the
// backlog is empty.
func TestTheBacklogIsWhatThePeerHasNotAcknowledged(t *testing.T) {
	read := make(chan struct{})
	drained := make(chan struct{})
	addr := serve(t, func(c net.Conn) {
		c.(*net.TCPConn).SetReadBuffer(64 << 10)
		<-read
		io.CopyN(io.Discard, c, 32<<20)
		close(drained)
		io.Copy(io.Discard, c)
	})
	m := New(nil, nil)
	c, err := m.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go writeAll(c, make([]byte, 32<<20))
	deadline := time.Now().Add(10 * time.Second)
	for {
		backlog, ok := m.Backlog()
		if !ok {
			t.Fatal("no backlog on Linux")
		}
		if written := m.Written(); written > 1<<20 && backlog > written/2 {
			break // most of what was handed over waits
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d B of %d B written to a peer that does not read", backlog, m.Written())
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(read)
	<-drained
	for {
		backlog, _ := m.Backlog()
		if backlog == 0 && m.Written() == 32<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d B after the peer read all %d B written", backlog, m.Written())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The answer lag runs from the request's body's last byte acknowledged
// to the answer's first byte: a server that answers 300 ms after reading
// a 64 KiB body makes it 300 ms, not the time the body took to go out. A
// small request's answer (at once) is the lag only until a large one's is
// known.
func TestTheAnswerLagRunsFromTheLastByteAcknowledgedToTheAnswer(t *testing.T) {
	const think = 300 * time.Millisecond
	srv := thinkingServer(t, think)
	m := New(nil, nil)
	if _, ok := m.AnswerLag(); ok {
		t.Fatal("an answer lag before any answer")
	}
	c := meteredClient(t, m, nil)
	postBody(t, c, srv.URL, 100)
	if lag, ok := m.AnswerLag(); !ok || lag >= think/2 {
		t.Fatalf("after a 100 B request answered at once, the lag is %s (known %v), want under %s", lag, ok, think/2)
	}
	postBody(t, c, srv.URL, 64<<10)
	lag, ok := m.AnswerLag()
	// A loaded machine looks late at what is acknowledged, which shortens
	// the lag, and answers late, which lengthens it: within a half.
	if !ok || lag < think/2 || lag > think+time.Second {
		t.Fatalf("answer lag %s (known %v), want about %s", lag, ok, think)
	}
}

// A batch's answer is kept with when it came and what every connection
// had acknowledged when its body was: a server that reads a 64 KiB body
// and answers 300 ms later gives an answer whose count acknowledged is
// at least the body (and no more than what is acknowledged now), come
// after the body was sent. A small request's answer is not one.
func TestAnAnswerKeepsWhatWasAcknowledgedWhenItsBodyWas(t *testing.T) {
	const think = 300 * time.Millisecond
	srv := thinkingServer(t, think)
	m := New(nil, nil)
	c := meteredClient(t, m, nil)
	postBody(t, c, srv.URL, 100)
	if a := m.Answers(); len(a) != 0 {
		t.Fatalf("answers %v after a 100 B request, want none", a)
	}
	sent := time.Now()
	postBody(t, c, srv.URL, 64<<10)
	a := m.Answers()
	now, _ := m.Acked()
	if len(a) != 1 {
		t.Fatalf("answers %v after a 64 KiB request, want one", a)
	}
	if a[0].Acked < 64<<10 || a[0].Acked > now {
		t.Errorf("the answer's count acknowledged is %d B, want at least the 64 KiB body and at most the %d B acknowledged now", a[0].Acked, now)
	}
	if a[0].At.Before(sent.Add(think)) || a[0].At.After(time.Now()) {
		t.Errorf("the answer came at %s, the body was sent at %s and the server thinks %s", a[0].At, sent, think)
	}
}

// Answers keeps more than the latest four batches' answers the lag is
// the median of: ten batches answered one after the other, each 100 ms
// after its body, are more than four answers (the ten, but for one whose
// body a loaded machine saw acknowledged only with its answer), oldest
// first, each counting at least a body more than the one before (their
// times and counts tell the rate the bodies cross the path at).
func TestAnswersKeepsMoreThanTheLagsFour(t *testing.T) {
	srv := thinkingServer(t, 100*time.Millisecond)
	m := New(nil, nil)
	c := meteredClient(t, m, nil)
	for range 10 {
		postBody(t, c, srv.URL, 64<<10)
	}
	a := m.Answers()
	if len(a) <= lagAnswers {
		t.Fatalf("%d answers after ten 64 KiB batches, want more than %d", len(a), lagAnswers)
	}
	for i := 1; i < len(a); i++ {
		if a[i].At.Before(a[i-1].At) || a[i].Acked < a[i-1].Acked+64<<10 {
			t.Fatalf("answer %d (%v) does not follow answer %d (%v) by a body", i, a[i], i-1, a[i-1])
		}
	}
}

// What a connection's peer acknowledged stays counted once it is closed,
// and a request's body counts in flight, as far as its peer acknowledged
// it, only until its answer: a body that is sent again counts again from
// nothing, in flight, while Acked counts every time it went.
func TestAckedKeepsClosedConnectionsAndInFlightOnlyUnansweredBodies(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	m := New(nil, nil)
	var tr *http.Transport
	c := meteredClient(t, m, func(x *http.Transport) { tr = x })
	const size = 1 << 20
	deadline := time.Now().Add(10 * time.Second)
	body := make([]byte, size)
	// post sends the body, waits until all of it is in flight and has it
	// answered.
	post := func(which string) {
		t.Helper()
		done := make(chan error)
		go func() {
			resp, err := c.Post(srv.URL, "application/octet-stream", bytes.NewReader(body))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
		for {
			n, ok := m.InFlight()
			if !ok {
				t.Fatal("no count in flight on Linux")
			} else if n > size {
				t.Fatalf("%s: %d B in flight of a %d B body", which, n, size)
			} else if n == size {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d B in flight of a %d B body the server read, want all of it", which, n, size)
			}
			time.Sleep(10 * time.Millisecond)
		}
		release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n, _ := m.InFlight(); n != 0 {
			t.Fatalf("%s: %d B in flight once the request was answered, want 0", which, n)
		}
	}
	post("the first")
	first, _ := m.Acked()
	// The same body again: in flight from nothing up to its size, not
	// past it, while Acked counts it once more.
	post("sent again")
	if n, _ := m.Acked(); n < first+size {
		t.Fatalf("%d B acknowledged after the body went twice, want at least %d", n, first+size)
	}
	// The connection goes back to the idle pool once its answer was read
	// (net/http's own goroutine): closed once it is there.
	for tr.CloseIdleConnections(); m.Written() != 0; tr.CloseIdleConnections() {
		if time.Now().After(deadline) {
			t.Fatalf("%d B written to open connections after every one closed", m.Written())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, ok := m.Acked(); !ok || n < 2*size {
		t.Fatalf("%d B acknowledged (known %v) once the connection closed, want at least the %d B body twice", n, ok, size)
	}
}

// A request answered 2xx whose key the caller has not yet settled still
// counts in flight, all of its body: the caller records the answer after
// it came, and until then the body is not to deliver again. Settling its
// key drops it; a request with no key drops at its answer.
func TestAnAnsweredBodyCountsInFlightUntilItsKeyIsSettled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	m := New(nil, nil)
	m.HoldAnswers("Idempotency-Key")
	c := meteredClient(t, m, nil)
	const size = 256 << 10
	post := func(key string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(make([]byte, size)))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post("op-1")
	if n, ok := m.InFlight(); !ok || n != size {
		t.Fatalf("%d B in flight (known %v) once op-1 was answered and not settled, want its %d B body", n, ok, size)
	}
	m.Settled("op-1")
	if n, _ := m.InFlight(); n != 0 {
		t.Fatalf("%d B in flight once op-1 was settled, want 0", n)
	}
	post("")
	if n, _ := m.InFlight(); n != 0 {
		t.Fatalf("%d B in flight once a request without a key was answered, want 0", n)
	}
}

// What the transport has read of a body and not yet written to the
// connection is not acknowledged: a peer that stops reading leaves the
// request's count in flight at what it acknowledged, not above it by the
// bytes the transport holds in its copy buffer.
func TestInFlightCountsNoBodyBytesTheTransportHoldsUnwritten(t *testing.T) {
	stop := make(chan struct{})
	addr := serve(t, func(c net.Conn) { <-stop }) // reads nothing
	t.Cleanup(func() { close(stop) })
	m := New(nil, nil)
	c := meteredClient(t, m, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr, bytes.NewReader(make([]byte, 64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	// The buffers fill: nothing more is written nor acknowledged.
	deadline := time.Now().Add(4 * time.Second)
	last := int64(-1)
	for {
		time.Sleep(200 * time.Millisecond)
		acked, _ := m.Acked()
		if acked == last && acked > 0 {
			break
		}
		last = acked
		if time.Now().After(deadline) {
			t.Fatal("the buffers did not fill")
		}
	}
	acked, _ := m.Acked()
	if n, ok := m.InFlight(); !ok || n > acked {
		t.Fatalf("%d B in flight (known %v), more than the %d B the peer acknowledged, headers and all", n, ok, acked)
	}
}

// layered is a dialer's own layer over a connection, which says what it
// wraps as *tls.Conn does.
type layered struct{ net.Conn }

func (l layered) NetConn() net.Conn { return l.Conn }

// A connection a dialer wrapped in its own layer (one that names what it
// wraps) is still the meter's: its requests get their answer lag.
func TestARequestOnAConnectionUnderAnotherLayerGetsItsLag(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	m := New(nil, nil)
	c := meteredClient(t, m, func(tr *http.Transport) {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := m.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return layered{c}, nil
		}
	})
	resp, err := c.Post(srv.URL, "application/octet-stream", bytes.NewReader(make([]byte, 64<<10)))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, ok := m.AnswerLag(); !ok {
		t.Fatal("no answer lag for a request on a layered connection")
	}
}

// thinkingServer reads each request's body and answers it, think later
// when the body was 64 KiB or more.
func thinkingServer(t *testing.T, think time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if n >= 64<<10 {
			time.Sleep(think)
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// postBody posts size bytes to url through c and reads the answer.
func postBody(t *testing.T, c *http.Client, url string, size int) {
	t.Helper()
	resp, err := c.Post(url, "application/octet-stream", bytes.NewReader(make([]byte, size)))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
