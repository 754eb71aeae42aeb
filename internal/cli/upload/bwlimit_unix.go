//go:build unix

package upload

import (
	"os"
	"os/signal"
	"syscall"
)

func notifyToggle(ch chan<- os.Signal) { signal.Notify(ch, syscall.SIGUSR2) }
