package tilestore

import "syscall"

// readExactlyAt reads the regular file name in the directory dirfd into
// dst when its size is exactly len(dst) (see BlobStore.ReadExactly).
// O_NONBLOCK: opening a FIFO put where a blob should be returns at once
// (and is then refused as not a regular file) instead of waiting for a
// writer.
func readExactlyAt(dirfd int, name string, dst []byte) bool {
	var fd int
	var err error
	for {
		fd, err = syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NOCTTY|syscall.O_NONBLOCK, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size != int64(len(dst)) {
		return false
	}
	for off := 0; off < len(dst); {
		n, err := syscall.Read(fd, dst[off:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil || n <= 0:
			return false // an error, or the file shrank since the fstat
		}
		off += n
	}
	return true
}
