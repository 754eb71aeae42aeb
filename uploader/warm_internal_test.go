package uploader

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// acceptor is a loopback listener that counts the connections it
// accepted and can close them all.
type acceptor struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newAcceptor(t *testing.T) *acceptor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &acceptor{ln: ln}
	t.Cleanup(func() { ln.Close(); a.closeAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.conns = append(a.conns, c)
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *acceptor) accepted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

func (a *acceptor) closeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.conns {
		c.Close()
	}
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 5s: %s", what)
		}
	}
}

func TestWarmDialerOpensNoMoreThanItWasAskedForOrTheTransportTook(t *testing.T) {
	a := newAcceptor(t)
	d := newWarmDialer(nil, time.Now)
	ctx := context.Background()
	addr := a.ln.Addr().String()
	// Before the transport's first dial it does not know where to dial.
	d.ahead(4)
	time.Sleep(50 * time.Millisecond)
	if n := a.accepted(); n != 0 {
		t.Fatalf("%d connections accepted before the transport dialed anything", n)
	}
	first, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "4 connections open (the transport's and 3 ahead)", func() bool { return a.accepted() == 4 })
	d.ahead(10)
	eventually(t, "10 connections open", func() bool { return a.accepted() == 10 })
	time.Sleep(50 * time.Millisecond)
	if n := a.accepted(); n != 10 {
		t.Fatalf("%d connections accepted, asked for 10", n)
	}
	// The transport's next 9 dials take what was dialed ahead; one more
	// dials.
	conns := []net.Conn{first}
	for range 9 {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if n := a.accepted(); n != 10 {
		t.Fatalf("%d connections accepted after taking the 9 dialed ahead, want 10", n)
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, c)
	eventually(t, "an 11th connection for the 11th dial", func() bool { return a.accepted() == 11 })
	// Asking for fewer than are open closes nothing and dials nothing;
	// closed ones no longer count.
	d.ahead(5)
	for _, c := range conns[:8] {
		c.Close()
	}
	if open, parked := d.counts(); open != 3 || parked != 0 {
		t.Fatalf("open %d, parked %d after closing 8 of 11; want 3, 0", open, parked)
	}
	d.ahead(5)
	// Accepted is not yet parked: the dial's goroutine parks what it
	// dialed once its dial returns, after the peer accepted.
	eventually(t, "2 more dialed ahead to make 5, parked", func() bool {
		_, parked := d.counts()
		return a.accepted() == 13 && parked == 2
	})
	// A run's end closes what is parked.
	d.idle()
	if open, parked := d.counts(); open != 3 || parked != 0 {
		t.Fatalf("open %d, parked %d after idle; want 3, 0", open, parked)
	}
}

// A run's end ends the dials ahead still in progress (a provider that
// does not answer SYNs holds each for the dial timeout).
func TestWarmDialerEndsItsDialsInProgressWhenTheRunEnds(t *testing.T) {
	var blocked, ended atomic.Int32 // dials ahead that began waiting, and that returned
	first := true
	var mu sync.Mutex
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		isFirst := first
		first = false
		mu.Unlock()
		if isFirst { // the transport's own: answered at once
			c, _ := net.Pipe()
			return c, nil
		}
		blocked.Add(1)
		defer ended.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	d := newWarmDialer(dial, time.Now)
	d.ahead(4)
	c, err := d.DialContext(context.Background(), "tcp", "provider:443")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, "3 dials ahead in progress", func() bool { return blocked.Load() == 3 })
	d.idle()
	eventually(t, "the 3 dials ahead ended after the run ended", func() bool { return ended.Load() == 3 })
	eventually(t, "only the transport's connection counted", func() bool { open, _ := d.counts(); return open == 1 })
}

// A connection parked past maxParked is closed and replaced on the next
// ahead, before the transport's next dial finds it stale and has to dial
// one of its own.
func TestWarmDialerReplacesAParkedConnectionPastItsAgeOnTheNextAhead(t *testing.T) {
	var mu sync.Mutex
	var peers []net.Conn // the far ends of what was dialed, in order
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, peer := net.Pipe()
		mu.Lock()
		peers = append(peers, peer)
		mu.Unlock()
		return c, nil
	}
	dialed := func() int { mu.Lock(); defer mu.Unlock(); return len(peers) }
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	d := newWarmDialer(dial, now)
	d.ahead(2)
	c, err := d.DialContext(context.Background(), "tcp", "provider:80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, "one parked", func() bool { _, parked := d.counts(); return parked == 1 })
	clock.Add(int64(maxParked + time.Second))
	d.ahead(2)
	eventually(t, "a third dial, replacing the stale one", func() bool { return dialed() == 3 })
	eventually(t, "the fresh one parked", func() bool { open, parked := d.counts(); return open == 2 && parked == 1 })
	mu.Lock()
	stale := peers[1]
	mu.Unlock()
	_ = stale.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := stale.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the stale parked connection's peer read %v, want io.EOF (closed)", err)
	}
}

// holdTimer is a warmDialer's hold timer that fires when the test says.
type holdTimer struct {
	mu sync.Mutex
	f  func()
}

func (h *holdTimer) after(_ time.Duration, f func()) func() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.f = f
	return func() bool { return true }
}

func (h *holdTimer) fire(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	f := h.f
	h.mu.Unlock()
	if f == nil {
		t.Fatal("the hold was never armed: the transport's first dial arms it")
	}
	f()
}

// warmOnClock is a dialer on a clock the test moves, with its hold's
// timer in the test's hands.
func warmOnClock() (*warmDialer, *atomic.Int64, *holdTimer) {
	var clock atomic.Int64
	d := newWarmDialer(nil, func() time.Time { return time.Unix(0, clock.Load()) })
	h := &holdTimer{}
	d.after = h.after
	return d, &clock, h
}

// On a link whose first answer comes within warmHold of the transport's
// first dial (loopback, a LAN), a handshake costs next to nothing:
// nothing is dialed ahead, then or later, and each connection opens when
// the transport needs it.
func TestWarmDialerDialsNothingAheadOnALinkThatAnswersWithinTheHold(t *testing.T) {
	a := newAcceptor(t)
	d, clock, hold := warmOnClock()
	d.ahead(4)
	c, err := d.DialContext(context.Background(), "tcp", a.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if open, _ := d.counts(); open != 1 {
		t.Fatalf("%d connections open or dialing before any answer and within the hold, want the transport's 1", open)
	}
	clock.Add(int64(warmHold / 5))
	d.http1() // the first answer
	d.ahead(8)
	hold.fire(t) // the hold's timer, late: the answer already told
	d.ahead(8)
	if open, _ := d.counts(); open != 1 {
		t.Fatalf("%d connections open or dialing on a link that answered within the hold, want the transport's 1", open)
	}
}

// On a longer link the connections asked for are dialed ahead once the
// hold passes with no answer (during the first request's round trip),
// or once the first answer comes after it, whichever is first.
func TestWarmDialerDialsAheadOnceTheHoldPassesWithoutAnAnswer(t *testing.T) {
	for _, how := range []string{"the hold's timer", "an answer after the hold"} {
		t.Run(how, func(t *testing.T) {
			a := newAcceptor(t)
			d, clock, hold := warmOnClock()
			d.ahead(4)
			c, err := d.DialContext(context.Background(), "tcp", a.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if open, _ := d.counts(); open != 1 {
				t.Fatalf("%d connections open or dialing within the hold, want the transport's 1", open)
			}
			if how == "the hold's timer" {
				hold.fire(t)
			} else {
				clock.Add(int64(warmHold))
				d.http1()
			}
			if open, _ := d.counts(); open != 4 {
				t.Fatalf("%d connections open or dialing after %s, want the 4 asked for", open, how)
			}
			eventually(t, "3 connections dialed ahead", func() bool { return a.accepted() == 4 })
			d.idle()
		})
	}
}
