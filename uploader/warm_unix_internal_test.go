//go:build unix

package uploader

import (
	"context"
	"io"
	"testing"
	"time"
)

// A connection held ahead whose peer closed it (a provider that closes
// connections that sent nothing) is not handed out: peerOpen looks into
// it, which only unix systems let it do.
func TestWarmDialerHandsOutNoConnectionItsPeerClosed(t *testing.T) {
	a, d, addr := twoParkedClosedByThePeer(t)
	got, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	// The 2 closed ones are not handed out: a new one is dialed.
	eventually(t, "a 4th connection accepted", func() bool { return a.accepted() == 4 })
	// The new one works: the peer sees what is written.
	a.mu.Lock()
	peer := a.conns[3]
	a.mu.Unlock()
	if _, err := got.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(peer, buf); err != nil {
		t.Fatalf("the new connection's peer read %v", err)
	}
	if open, parked := d.counts(); open != 2 || parked != 0 {
		t.Fatalf("open %d, parked %d; want 2 (the first and the new one), 0", open, parked)
	}
}

// A parked connection its peer closed is closed and replaced on the next
// ahead, before the transport's next dial would find it closed.
func TestWarmDialerReplacesAParkedConnectionItsPeerClosedOnTheNextAhead(t *testing.T) {
	a, d, _ := twoParkedClosedByThePeer(t)
	d.ahead(3)
	eventually(t, "2 more dialed to replace them", func() bool { return a.accepted() == 5 })
	eventually(t, "3 open, 2 of them parked", func() bool { open, parked := d.counts(); return open == 3 && parked == 2 })
}

// twoParkedClosedByThePeer is a dialer asked for 3 connections ahead, one
// of them taken (open until the test ends) and 2 parked, whose peer has
// then closed all of them (a provider that closes connections that sent
// nothing).
func twoParkedClosedByThePeer(t *testing.T) (*acceptor, *warmDialer, string) {
	t.Helper()
	a := newAcceptor(t)
	d := newWarmDialer(nil, time.Now)
	addr := a.ln.Addr().String()
	d.ahead(3)
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	eventually(t, "2 dialed ahead", func() bool { _, parked := d.counts(); return parked == 2 && a.accepted() == 3 })
	a.closeAll()
	time.Sleep(50 * time.Millisecond) // for the peer's close to arrive
	return a, d, addr
}
