//go:build !linux

package tilestore

import "syscall"

// syncFS flushes every filesystem where syncfs(2) is not available.
func syncFS(string) error {
	syscall.Sync()
	return nil
}
