//go:build unix

package fdr

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes flock(2) on f: exclusive for writers, shared for readers.
// flock is per open file description, so it also orders two Recorders of
// one process that opened the file separately, and the kernel drops it
// when a holder dies, so a crashed writer never wedges the ring.
func lockFile(f *os.File, exclusive bool) (unlock func(), err error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	fd := int(f.Fd())
	for {
		err = unix.Flock(fd, how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { _ = unix.Flock(fd, unix.LOCK_UN) }, nil
}

// syncData makes the file's data (not necessarily its mtime) durable.
func syncData(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

func mapFile(f *os.File, size int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func unmapFile(b []byte) error {
	if b == nil {
		return nil
	}
	return unix.Munmap(b)
}
