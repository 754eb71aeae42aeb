//go:build unix

package uploader

import (
	"errors"
	"net"
	"syscall"
)

// peerOpen reports whether c's peer has neither closed it nor sent
// anything: a connection to an HTTP/1.1 server that has not been asked
// anything has nothing to read. It peeks without waiting; a connection
// it cannot look into counts as open.
func peerOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read (EAGAIN) is an open, quiet connection; a byte,
		// an end (0) or an error is not one a request can go on.
		open = n < 0 && (errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK))
		return true
	})
	return err == nil && open
}
