//go:build !unix

package linkemu

// setReceiveBuffer leaves the platform's receive buffer as it is.
func setReceiveBuffer(uintptr, int) error { return nil }
