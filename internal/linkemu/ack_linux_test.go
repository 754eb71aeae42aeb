package linkemu

import (
	"context"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/sockmeter"
)

// What the link has not taken waits in the sender's own socket,
// unacknowledged, as it waits on a real path: the sender's kernel counts
// as acknowledged no more than the bytes that left the queue, the queue
// and a few kilobytes per connection, however much it was handed.
func TestTheSenderSeesUnacknowledgedWhatTheLinkHasNotTaken(t *testing.T) {
	const rate, queue = 8_000_000, 64 << 10 // 1 MB/s
	addr := server(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	l, p := newLink(t, Config{UpRate: rate, DownRate: rate, Delay: 5 * time.Millisecond, QueueBytes: queue}, addr)
	m := sockmeter.New(nil, nil)
	const conns = 4
	payload := make([]byte, 2<<20)
	rand.Read(payload)
	for range conns {
		c, err := m.DialContext(context.Background(), "tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go func() { // in pieces, as net/http writes: each counted once written
			for b := payload; len(b) > 0; b = b[min(len(b), 16<<10):] {
				if _, err := c.Write(b[:min(len(b), 16<<10)]); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	backlog, ok := m.Backlog()
	if !ok {
		t.Fatal("no backlog on Linux")
	}
	took := l.Stats().UpBytes // read before the sender's count: it only grows
	acked := m.Written() - backlog
	t.Logf("written %d, backlog %d, acked %d, link took %d", m.Written(), backlog, acked, took)
	const perConn = 16 << 10
	if slack := acked - took; slack > queue+conns*(perConn+chunkBytes) {
		t.Fatalf("the senders' kernels count %d B acknowledged, the link has taken %d B: %d B acknowledged before the bottleneck, want at most the queue (%d B) and %d B a connection",
			acked, took, slack, queue, perConn+chunkBytes)
	}
}
