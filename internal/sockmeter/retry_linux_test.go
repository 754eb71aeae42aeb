package sockmeter

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// dialed is a connection the Meter follows, to a listener that reads
// what comes.
func dialed(t *testing.T, m *Meter) *conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	nc, err := m.DialContext(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc.(*conn)
}

// When net/http sends a request again on a new connection by itself (a
// reused connection failed), the request starts over there: nothing of
// the failed attempt's end, write, looks or acknowledgement is the new
// connection's, and its body counts from nothing, the replayed one
// counted as it is read.
func TestARequestNetHTTPSendsAgainStartsOverOnItsNewConnection(t *testing.T) {
	m := New(nil, nil)
	first, second := dialed(t, m), dialed(t, m)
	if _, err := first.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	r := &request{m: m}
	r.gotConn(first)
	r.body.Store(600)
	at := time.Now()
	r.end, r.wroteAt, r.sampledAt, r.ackedAt = first.written.Load(), at, at, at
	r.gotConn(second)
	if r.c != second || r.end != 0 || !r.wroteAt.IsZero() || !r.sampledAt.IsZero() || !r.ackedAt.IsZero() || r.body.Load() != 0 {
		t.Fatalf("after a new connection: conn %p (want %p), end %d, wrote %v, sampled %v, acked %v, body %d; want all started over",
			r.c, second, r.end, r.wroteAt, r.sampledAt, r.ackedAt, r.body.Load())
	}

	// The replayed body (GetBody) is counted as the first was.
	var got *http.Request
	rt := m.RoundTripper(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		got = req
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}))
	req, err := http.NewRequest(http.MethodPost, "http://example.invalid/", bytes.NewReader(make([]byte, 300)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got.GetBody == nil {
		t.Fatal("the request sent on has no GetBody")
	}
	body, err := got.GetBody()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := body.(*countedBody); !ok {
		t.Fatalf("the replayed body is a %T, not counted", body)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
