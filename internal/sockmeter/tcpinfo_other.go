//go:build !linux

package sockmeter

import (
	"errors"
	"net"
)

const supported = false

func bytesAcked(*net.TCPConn) (int64, error) {
	return 0, errors.New("no TCP_INFO on this platform")
}
