package fdr

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocate gives every byte of the ring's file real blocks (fallocate(2),
// size unchanged). The ring is written through a memory map: a page of a
// sparse file that the filesystem cannot back when it is first written
// (a full disk) is a SIGBUS that kills the process mid-record, where a
// failed fallocate is an error before anything is written. A filesystem
// without fallocate (EOPNOTSUPP) keeps the sparse file, as before.
func allocate(f *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		switch err {
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP, unix.ENOSYS:
			return nil
		}
		return err
	}
}
