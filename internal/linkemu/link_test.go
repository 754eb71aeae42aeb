package linkemu

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// server is a loopback TCP server whose every connection handle serves.
func server(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); handle(c) }()
		}
	}()
	return ln.Addr().String()
}

func newLink(t *testing.T, cfg Config, target string) (*Link, *Proxy) {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p, err := l.Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	return l, p
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func echo(c net.Conn) { io.Copy(c, c) }

// Two connections at once share the link's rate: together they take as
// long as one connection carrying both payloads, not half of it.
func TestConnectionsShareOneRate(t *testing.T) {
	const rate = 16_000_000 // 2 MB/s
	const each = 1 << 20
	var mu sync.Mutex
	received := 0
	done := make(chan struct{})
	addr := server(t, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		mu.Lock()
		received += int(n)
		if received == 2*each {
			close(done)
		}
		mu.Unlock()
	})
	_, p := newLink(t, Config{UpRate: rate, DownRate: rate, Delay: 5 * time.Millisecond}, addr)
	payload := make([]byte, each)
	start := time.Now()
	for range 2 {
		c := dial(t, p.Addr())
		go func() { c.Write(payload); c.CloseWrite() }()
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the payloads did not arrive within 10s")
	}
	got := time.Since(start)
	want := time.Duration(float64(2*each*8) / rate * float64(time.Second)) // 1.05 s
	if got < want*9/10 || got > want*3/2 {
		t.Fatalf("two connections carried %d B in %v; one shared link at %d bit/s takes %v", 2*each, got, rate, want)
	}
}

// A connection's first byte reaches the far end one propagation delay
// after it was sent, and an echo comes back after two.
func TestDelayAndRoundTrip(t *testing.T) {
	const delay = 60 * time.Millisecond
	t.Run("first byte", func(t *testing.T) {
		arrived := make(chan time.Time, 1)
		addr := server(t, func(c net.Conn) {
			b := make([]byte, 1)
			if _, err := c.Read(b); err == nil {
				arrived <- time.Now()
			}
		})
		_, p := newLink(t, Config{UpRate: 10_000_000, DownRate: 10_000_000, Delay: delay}, addr)
		c := dial(t, p.Addr())
		sent := time.Now()
		c.Write([]byte{1})
		got := (<-arrived).Sub(sent)
		if got < delay || got > delay+30*time.Millisecond {
			t.Fatalf("first byte arrived after %v, want about %v", got, delay)
		}
	})
	t.Run("handshake", func(t *testing.T) {
		arrived := make(chan time.Time, 1)
		addr := server(t, func(c net.Conn) {
			b := make([]byte, 1)
			if _, err := c.Read(b); err == nil {
				arrived <- time.Now()
			}
		})
		_, p := newLink(t, Config{Delay: delay, Handshake: true}, addr)
		sent := time.Now()
		c := dial(t, p.Addr())
		c.Write([]byte{1})
		got := (<-arrived).Sub(sent)
		if got < 3*delay || got > 3*delay+30*time.Millisecond {
			t.Fatalf("with the handshake, first byte arrived after %v, want about %v", got, 3*delay)
		}
	})
	t.Run("echo", func(t *testing.T) {
		addr := server(t, echo)
		_, p := newLink(t, Config{UpRate: 10_000_000, DownRate: 10_000_000, Delay: delay}, addr)
		c := dial(t, p.Addr())
		b := make([]byte, 1)
		for i := range 5 {
			start := time.Now()
			c.Write([]byte{byte(i)})
			if _, err := io.ReadFull(c, b); err != nil || b[0] != byte(i) {
				t.Fatalf("echo %d: got %v, %v", i, b, err)
			}
			if rtt := time.Since(start); rtt < 2*delay || rtt > 2*delay+30*time.Millisecond {
				t.Fatalf("echo %d took %v, want about %v", i, rtt, 2*delay)
			}
		}
	})
}

// rateMeter counts the bytes a server receives, for the rate over a window.
type rateMeter struct {
	mu sync.Mutex
	n  int64
}

func (m *rateMeter) add(n int)  { m.mu.Lock(); m.n += int64(n); m.mu.Unlock() }
func (m *rateMeter) get() int64 { m.mu.Lock(); defer m.mu.Unlock(); return m.n }

// over is the rate in bits/s the meter sees over d.
func (m *rateMeter) over(d time.Duration) float64 {
	n0, t0 := m.get(), time.Now()
	time.Sleep(d)
	return float64(m.get()-n0) * 8 / time.Since(t0).Seconds()
}

// SetRate takes effect while connections stream: within a fraction of a
// second the far end receives at the new rate, down and back up.
func TestSetRateWhileStreaming(t *testing.T) {
	var m rateMeter
	addr := server(t, func(c net.Conn) {
		b := make([]byte, 32<<10)
		for {
			n, err := c.Read(b)
			m.add(n)
			if err != nil {
				return
			}
		}
	})
	l, p := newLink(t, Config{UpRate: 40_000_000, DownRate: 40_000_000, Delay: 20 * time.Millisecond}, addr)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		c := dial(t, p.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 64<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
	}
	defer func() { close(stop); l.Close(); wg.Wait() }()
	check := func(rate float64) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // a fraction of a second to take effect
		if got := m.over(700 * time.Millisecond); got < 0.85*rate || got > 1.15*rate {
			t.Fatalf("at %.0f bit/s the far end receives %.0f bit/s", rate, got)
		}
	}
	check(40e6)
	l.SetRate(4_000_000)
	check(4e6)
	l.SetRate(40_000_000)
	check(40e6)
}

// A half-close travels the link: the server sees EOF after the bytes sent
// before it, answers, closes, and the client reads the answer then EOF.
func TestHalfCloseAndClose(t *testing.T) {
	addr := server(t, func(c net.Conn) {
		got, err := io.ReadAll(c)
		if err != nil {
			return
		}
		c.Write(append([]byte("got "), got...))
	})
	_, p := newLink(t, Config{UpRate: 1_000_000, DownRate: 1_000_000, Delay: 10 * time.Millisecond}, addr)
	c := dial(t, p.Addr())
	c.Write([]byte("hello"))
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "got hello" {
		t.Fatalf("after a half-close the client read %q, %v; want %q and EOF", got, err, "got hello")
	}
}

// A full queue holds the sender back instead of taking more or losing
// bytes: the link accepts no more than its rate plus its queue, and every
// byte arrives, in order.
func TestFullQueueHoldsTheSender(t *testing.T) {
	const rate, queue = 8_000_000, 64 << 10 // 1 MB/s
	payload := make([]byte, 3<<20)
	rand.Read(payload)
	got := make(chan []byte, 1)
	release := make(chan struct{})
	addr := server(t, func(c net.Conn) {
		<-release
		b, _ := io.ReadAll(c)
		got <- b
	})
	l, p := newLink(t, Config{UpRate: rate, DownRate: rate, Delay: 5 * time.Millisecond, QueueBytes: queue}, addr)
	c := dial(t, p.Addr())
	go func() { c.Write(payload); c.CloseWrite() }()
	start := time.Now()
	time.Sleep(500 * time.Millisecond)
	took := l.Stats().UpBytes
	limit := int64(time.Since(start).Seconds()*rate/8) + queue + chunkBytes
	if took > limit {
		t.Fatalf("in %v the link took %d B from the sender; rate and queue allow %d", time.Since(start), took, limit)
	}
	if took < limit/2 {
		t.Fatalf("in %v the link took only %d B; rate and queue allow %d", time.Since(start), took, limit)
	}
	close(release)
	select {
	case b := <-got:
		if !bytes.Equal(b, payload) {
			t.Fatalf("the server received %d B that differ from the %d B sent", len(b), len(payload))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the payload did not arrive within 10s")
	}
}

// Close ends every goroutine the link started, even with connections
// blocked on a full queue and a receiver that does not read.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	block := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var srv sync.WaitGroup
	srv.Add(1)
	go func() {
		defer srv.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			srv.Add(1)
			go func() { defer srv.Done(); <-block; c.Close() }()
		}
	}()
	l, err := New(Config{UpRate: 1_000_000, DownRate: 1_000_000, Delay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var clients sync.WaitGroup
	for range 4 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		clients.Add(1)
		go func() {
			defer clients.Done()
			defer c.Close()
			b := make([]byte, 64<<10)
			for {
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if l.Stats().Conns != 4 {
		t.Fatalf("the link accepted %d connections, want 4", l.Stats().Conns)
	}
	l.Close()
	clients.Wait() // the clients' writes fail once the proxy closed them
	close(block)
	ln.Close()
	srv.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{UpRate: -1}, {DownRate: -5}, {Delay: -time.Second}, {QueueBytes: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted a bad config", cfg)
		}
	}
}
