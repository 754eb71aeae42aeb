//go:build !linux

package fdr

import "os"

// allocate is a no-op where fallocate(2) is not available: the ring stays
// a sparse file (see alloc_linux.go).
func allocate(f *os.File, size int64) error { return nil }
