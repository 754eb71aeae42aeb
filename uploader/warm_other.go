//go:build !unix

package uploader

import "net"

// peerOpen cannot look into a connection here: it counts as open, and a
// request that finds it closed fails and is resent as any other.
func peerOpen(net.Conn) bool { return true }
