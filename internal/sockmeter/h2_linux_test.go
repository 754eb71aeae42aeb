package sockmeter

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// h2Client is a client as the uploader builds one (a clone of net/http's
// default transport, which attempts HTTP/2) dialing through m and
// followed by it, trusting srv's certificate.
func h2Client(t *testing.T, srv *httptest.Server, m *Meter) *http.Client {
	return meteredClient(t, m, func(tr *http.Transport) {
		tr.TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	})
}

// Over HTTP/2 the requests in flight share one connection, and the server
// sends frames of its own (settings, window updates) before any answer:
// the answer lag is each request's own, from its body's last byte
// acknowledged to its answer's first byte. Four 64 KiB requests at once
// on one connection, each answered 300 ms after its body was read, make
// it about 300 ms.
func TestOverHTTP2TheAnswerLagIsEachRequestsOwn(t *testing.T) {
	const think = 300 * time.Millisecond
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(think)
		w.Write([]byte("ok"))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	m := New(nil, nil)
	var dials atomic.Int32
	dial := m.dial
	m.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	c := h2Client(t, srv, m)
	post := func() {
		resp, err := c.Post(srv.URL, "application/octet-stream", bytes.NewReader(make([]byte, 64<<10)))
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.ProtoMajor != 2 {
			t.Errorf("answered over %s, want HTTP/2", resp.Proto)
		}
	}
	post() // the connection, and HTTP/2 on it, before the requests at once
	for range 2 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(post)
		}
		wg.Wait()
	}
	if t.Failed() {
		return
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections, want the one every request shares", n)
	}
	lag, ok := m.AnswerLag()
	// A loaded machine looks late at what is acknowledged, which shortens
	// the lag, and answers late, which lengthens it: within a half.
	if !ok || lag < think/2 || lag > think+time.Second {
		t.Fatalf("answer lag %s (known %v), want about %s", lag, ok, think)
	}
}
