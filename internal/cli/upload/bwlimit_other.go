//go:build !unix

package upload

import "os"

// notifyToggle does nothing where there is no SIGUSR2.
func notifyToggle(chan<- os.Signal) {}
