package tilestore

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the whole filesystem holding dir (syncfs(2)).
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}
