package linkemu

import (
	"net"
	"sync"
	"time"
)

// chunk is bytes on their way across the link. The serializer sets queued
// when the chunk joins the queue and at, when it is due at the far end,
// once it has left; then it hands it to out, its connection's deliverer.
// A chunk with eof set carries no bytes: the sender closed its side.
type chunk struct {
	buf    *[]byte
	n      int
	queued time.Time
	at     time.Time
	eof    bool
	out    chan<- *chunk
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, chunkBytes); return &b }}

// inFlight bounds the chunks one connection has on the way in one
// direction, as a receive window does (16 MiB of full chunks): more than
// the queue and the propagation delay hold at the emulated rates, so the
// link is what limits, yet a receiver that stops reading stops the sender
// and never the wire.
const inFlight = 1024

// pump carries src's bytes to dst through s: it reads them from src as fast
// as the queue takes them, and a deliverer hands each to dst when it is
// due. The first bytes wait until notBefore (TCP's handshake when the link
// models it). When src ends, dst's write side is closed once the bytes
// before have arrived; when writing to dst fails, teardown closes both
// ends of the pair.
func pump(l *Link, s *serializer, src, dst net.Conn, notBefore time.Time, teardown func()) {
	out := make(chan *chunk, inFlight)
	window := make(chan struct{}, inFlight) // a token per chunk on the way
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deliver(l, out, window, dst, teardown)
	}()
	defer wg.Wait()

	var t timer
	if !notBefore.IsZero() && !t.sleepUntil(notBefore, l.done) {
		return
	}
	// send puts c on the link; the eof goes the same way, so it arrives
	// after the bytes before it.
	send := func(c *chunk) bool {
		select {
		case window <- struct{}{}:
		case <-l.done:
			return false
		}
		c.out = out
		return s.enqueue(c, l.done)
	}
	for {
		buf := bufPool.Get().(*[]byte)
		n, err := src.Read(*buf)
		if n == 0 || !send(&chunk{buf: buf, n: n}) {
			bufPool.Put(buf)
		}
		if err != nil {
			send(&chunk{eof: true})
			return
		}
	}
}

// deliver writes each chunk to dst when it is due and frees its window
// token, until the eof, which closes dst's write side. After a failed
// write it keeps draining, so no one waits on it.
func deliver(l *Link, in <-chan *chunk, window <-chan struct{}, dst net.Conn, teardown func()) {
	var t timer
	failed := false
	for {
		var c *chunk
		select {
		case c = <-in:
		case <-l.done:
			return
		}
		if !failed && !t.sleepUntil(c.at, l.done) {
			return
		}
		switch {
		case c.eof:
			if !failed {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				} else {
					dst.Close()
				}
			}
			return
		case !failed:
			if _, err := dst.Write((*c.buf)[:c.n]); err != nil {
				failed = true
				teardown()
			}
		}
		bufPool.Put(c.buf)
		<-window
	}
}
