package sockmeter

import (
	"net"

	"golang.org/x/sys/unix"
)

const supported = true

// bytesAcked is the bytes of c the peer has acknowledged (TCP_INFO's
// tcpi_bytes_acked).
func bytesAcked(c *net.TCPConn) (int64, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var serr error
	if err := rc.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return int64(info.Bytes_acked), nil
}
