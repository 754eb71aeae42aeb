// Package fdrtest helps tests of the flight data recorder's users act as
// another process would on the same ring file.
package fdrtest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// HoldLock takes the ring's flock at path through an open file description
// of its own, as another tilectl process's writer does, until the test
// ends or the returned func is called (calling it again does nothing).
func HoldLock(t testing.TB, path string) (release func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open the ring to hold its lock: %v", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		t.Fatalf("hold the ring's lock: %v", err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			f.Close() // drops the flock
		}
	}
	t.Cleanup(release)
	return release
}
