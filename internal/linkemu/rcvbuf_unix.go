//go:build unix

package linkemu

import "syscall"

// setReceiveBuffer sets the socket's SO_RCVBUF (Linux doubles it for its
// bookkeeping and keeps it from growing on its own).
func setReceiveBuffer(fd uintptr, bytes int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, bytes)
}
