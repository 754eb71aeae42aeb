package uploader

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the machines tilectl
// runs on (x86-64 and arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// adviseHugePages asks the kernel to back the whole 2 MiB pages inside b
// with transparent huge pages when they are first touched. A fresh arena
// on memory fresh from the system is first touched by the blob reads that
// fill it: with 4 KiB pages that is a page fault per 4 KiB of the batch,
// with huge pages one per 2 MiB. In the kernel's "madvise" mode only
// memory advised so gets huge pages, "always" gives them anyway, "never"
// ignores the advice; an error leaves
// the memory as it was: b's contents and lifetime are not affected
// either way (the Go heap still owns it).
func adviseHugePages(b []byte) {
	if len(b) < 2*hugePage {
		return // at most one whole huge page inside: not worth a system call
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := (p + hugePage - 1) &^ (hugePage - 1)
	end := (p + uintptr(len(b))) &^ (hugePage - 1)
	if end <= start {
		return
	}
	_ = unix.Madvise(b[start-p:end-p], unix.MADV_HUGEPAGE)
}
