package uploader_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/linkemu"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// arrivals wraps a provider and notes when its capabilities answer was
// written, when each batch request came and on which connection, and
// when the server accepted each connection (connState).
type arrivals struct {
	mu      sync.Mutex
	caps    time.Time
	batches []arrival
	opened  map[string]time.Time // by the connection's remote address
}

// arrival is a batch request: when it came, on which connection.
type arrival struct {
	at   time.Time
	conn string
}

func (a *arrivals) connState(c net.Conn, s http.ConnState) {
	if s == http.StateNew {
		a.mu.Lock()
		if a.opened == nil {
			a.opened = map[string]time.Time{}
		}
		a.opened[c.RemoteAddr().String()] = time.Now()
		a.mu.Unlock()
	}
}

func (a *arrivals) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tiles:batch") {
			a.mu.Lock()
			a.batches = append(a.batches, arrival{at: time.Now(), conn: r.RemoteAddr})
			a.mu.Unlock()
		}
		h.ServeHTTP(w, r)
		if r.URL.Path == "/v1/capabilities" {
			a.mu.Lock()
			a.caps = time.Now()
			a.mu.Unlock()
		}
	})
}

// On a long link every new connection pays a handshake round trip before
// its first byte. The connections of a run's first batches are opened
// while the provider is asked its limits, so the batches the limit
// starts with all reach the provider one round trip after it answered
// (the answer's way back, the batches' way there), not two: as many as
// the limit may start with before the answer says how big the batches
// are, which for batches this small (2 tiles of 1 KiB) is four times
// Initial. The test checks the connections, not the times: each of those
// batches comes on a connection the provider accepted before it
// answered (the emulated link's proxy connects to the provider as soon
// as the client dials it), where one dialed after the answer reached the
// client would be accepted half a round trip after the answer at the
// earliest, however busy the machine.
func TestTheFirstBatchesGoOnConnectionsOpenedDuringTheCapabilitiesRequest(t *testing.T) {
	const rtt = 400 * time.Millisecond
	p := providertest.Start(t, func(c *provider.Config) { c.Limits.MaxBatchTiles = 2 })
	var a arrivals
	hs := httptest.NewUnstartedServer(a.wrap(p.Server.Handler()))
	hs.Config.ConnState = a.connState
	hs.Start()
	t.Cleanup(hs.Close)
	l, err := linkemu.New(linkemu.Config{UpRate: 100e6, DownRate: 100e6, Delay: rtt / 2, Handshake: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	px, err := l.Listen(strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	const flight, first = "warm", 4 * concurrency.DefaultInitial
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, 2*first, 1<<10, 1)
	u, _ := newUploader(t, px.URL(), c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: flight})
	if err != nil || rep.Accepted != 2*first {
		t.Fatalf("accepted %d of %d: %v", rep.Accepted, 2*first, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.batches) < first || a.caps.IsZero() {
		t.Fatalf("the provider saw %d batches and capabilities answered at %v", len(a.batches), a.caps)
	}
	sort.Slice(a.batches, func(i, j int) bool { return a.batches[i].at.Before(a.batches[j].at) })
	for i, b := range a.batches[:first] {
		opened, ok := a.opened[b.conn]
		if !ok {
			t.Fatalf("batch %d came on connection %s, which the server did not see open", i+1, b.conn)
		}
		if opened.After(a.caps) {
			t.Errorf("batch %d of the first %d came on a connection opened %v after the capabilities answer, want one opened while it was asked",
				i+1, first, opened.Sub(a.caps).Round(time.Millisecond))
		}
	}
}

// countingListener notes each connection it accepts and how many bytes
// the server read from it.
type countingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*countedConn
}

type countedConn struct {
	net.Conn
	read atomic.Int64
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countedConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, cc)
	l.mu.Unlock()
	return cc, nil
}

// counts is the connections accepted and, of them, those the client sent
// nothing on.
func (l *countingListener) counts() (accepted, unused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		if c.read.Load() == 0 {
			unused++
		}
	}
	return len(l.conns), unused
}

// tlsRun serves a provider over TLS on loopback (HTTP/2 offered when h2),
// through a link of round trip rtt when it is not 0, and uploads a flight
// of a batch's tiles to it; it returns the listener that counted the
// connections and the protocol the batch came over.
func tlsRun(t *testing.T, h2 bool, rtt time.Duration) (*countingListener, int) {
	t.Helper()
	p := providertest.Start(t, nil)
	var proto atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			proto.Store(int32(r.ProtoMajor))
		}
		p.Server.Handler().ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = h2
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // connections closed before their handshake are what the tests count
	ln := &countingListener{Listener: srv.Listener}
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	flight := "warm-tls"
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, 1, 1<<10, 1)
	url := srv.URL
	if rtt > 0 {
		l, err := linkemu.New(linkemu.Config{UpRate: 100e6, DownRate: 100e6, Delay: rtt / 2, Handshake: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		px, err := l.Listen(strings.TrimPrefix(srv.URL, "https://"))
		if err != nil {
			t.Fatal(err)
		}
		url = "https://" + px.Addr()
	}
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) {
		o.TLS = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: flight})
	if err != nil || rep.Accepted != 1 {
		t.Fatalf("accepted %d of 1: %v", rep.Accepted, err)
	}
	return ln, int(proto.Load())
}

// An HTTPS provider may answer over HTTP/2, where one connection carries
// every request: nothing is dialed ahead until an answer shows which, so
// such a provider sees only the connection its requests use.
func TestAnHTTP2ProviderGetsNoConnectionsOpenedAhead(t *testing.T) {
	ln, proto := tlsRun(t, true, 0)
	if proto != 2 {
		t.Fatalf("the batch came over HTTP/%d, want HTTP/2", proto)
	}
	time.Sleep(100 * time.Millisecond) // a dial ahead would have been accepted by now
	if accepted, unused := ln.counts(); accepted > 2 || unused > 0 {
		t.Fatalf("the provider accepted %d connections, %d of them unused; want at most 2, none unused", accepted, unused)
	}
}

// An HTTPS provider that answers over HTTP/1.1 takes a request per
// connection: once the capabilities answer shows it, the first batches'
// connections are opened ahead as over plain HTTP, on a link whose
// handshakes cost enough to be worth it (here a 20 ms round trip).
func TestAnHTTP1ProviderOverTLSGetsConnectionsOpenedAheadAfterItsFirstAnswer(t *testing.T) {
	ln, proto := tlsRun(t, false, 20*time.Millisecond)
	if proto != 1 {
		t.Fatalf("the batch came over HTTP/%d, want HTTP/1.1", proto)
	}
	if accepted, _ := ln.counts(); accepted < concurrency.DefaultInitial {
		t.Fatalf("the provider accepted %d connections, want at least the %d the first batches may use, opened ahead",
			accepted, concurrency.DefaultInitial)
	}
}
