//go:build unix

package fdr

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of the pause between two tries of a busy flock. flock(2) has no
// timeout, so a wait that must end with its context polls LOCK_NB; holders
// keep the lock for microseconds, so a short pause rarely costs a waiter.
const (
	lockPollMin = 500 * time.Microsecond
	lockPollMax = 20 * time.Millisecond
)

// lockFile takes flock(2) on f: exclusive for writers, shared for readers.
// flock is per open file description, so it also orders two Recorders of
// one process that opened the file separately, and the kernel drops it
// when a holder dies, so a crashed writer never wedges the ring.
//
// A free lock is taken even if ctx has ended (a count that runs after the
// run's deadline still records what it commits); a busy one is waited for
// only as long as ctx allows, so a process that holds the lock (stopped,
// or slow) cannot hold a caller past its deadline.
func lockFile(ctx context.Context, f *os.File, exclusive bool) (unlock func(), err error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	fd := int(f.Fd())
	pause := lockPollMin
	var t *time.Timer
	for {
		err = unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(fd, unix.LOCK_UN) }, nil
		}
		if err == unix.EINTR {
			continue
		}
		if err != unix.EWOULDBLOCK {
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if t == nil {
			t = time.NewTimer(pause)
			defer t.Stop()
		} else {
			t.Reset(pause)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: another process holds it: %w", f.Name(), context.Cause(ctx))
		case <-t.C:
		}
		pause = min(2*pause, lockPollMax)
	}
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
