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
	a := newAcceptor(t)
	d := newWarmDialer(nil, time.Now)
	ctx := context.Background()
	addr := a.ln.Addr().String()
	d.ahead(3)
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, "2 dialed ahead", func() bool { _, parked := d.counts(); return parked == 2 && a.accepted() == 3 })
	a.closeAll() // the provider closes connections that sent nothing
	time.Sleep(50 * time.Millisecond)
	got, err := d.DialContext(ctx, "tcp", addr)
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
	a := newAcceptor(t)
	d := newWarmDialer(nil, time.Now)
	addr := a.ln.Addr().String()
	d.ahead(3)
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, "2 dialed ahead", func() bool { _, parked := d.counts(); return parked == 2 && a.accepted() == 3 })
	a.closeAll() // the provider closes connections that sent nothing
	time.Sleep(50 * time.Millisecond)
	d.ahead(3)
	eventually(t, "2 more dialed to replace them", func() bool { return a.accepted() == 5 })
	eventually(t, "3 open, 2 of them parked", func() bool { open, parked := d.counts(); return open == 3 && parked == 2 })
}
