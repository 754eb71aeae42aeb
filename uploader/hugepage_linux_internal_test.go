//go:build linux

package uploader

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tilectl/tilectl/tilestore"
)

// A large batch arena is advised for huge pages before its first fill:
// the kernel marks the memory of the arena's whole 2 MiB pages "hg"
// (VM_HUGEPAGE) in /proc/self/smaps, whatever it then does with the
// advice.
func TestALargeBatchArenaIsAdvisedForHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skipf("this kernel has no transparent huge pages to advise (%v)", err)
	}
	tiles := make([]tilestore.Tile, 128)
	for i := range tiles {
		tiles[i] = tilestore.Tile{ID: "t" + strconv.Itoa(i), SizeBytes: 64 << 10, CapturedAt: time.Unix(0, 0)}
	}
	tb := pooledTileBytes(tiles) // 8 MiB
	defer tb.release()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(tb.arena)))
	start := (p + hugePage - 1) &^ (hugePage - 1)
	flags, ok := vmFlagsAt(t, start)
	if !ok {
		t.Fatalf("no mapping in /proc/self/smaps holds the arena at %#x", start)
	}
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the arena's memory has VmFlags %q, want hg (advised for huge pages)", flags)
	}
	for i := range tb.arena {
		tb.arena[i] = byte(i)
	}
	for i := range tb.arena {
		if tb.arena[i] != byte(i) {
			t.Fatalf("arena byte %d is %d after the advice, want %d", i, tb.arena[i], byte(i))
		}
	}
}

// vmFlagsAt returns the VmFlags of the mapping of /proc/self/smaps that
// holds addr.
func vmFlagsAt(t *testing.T, addr uintptr) (string, bool) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := mappingRange(line); ok {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return "", false
}

// mappingRange parses the address range that starts a mapping's entry
// ("7f0000000000-7f0000200000 rw-p ...").
func mappingRange(line string) (lo, hi uintptr, ok bool) {
	r, _, found := strings.Cut(line, " ")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(r, "-")
	if !found {
		return 0, 0, false
	}
	l, err1 := strconv.ParseUint(a, 16, 64)
	h, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(l), uintptr(h), true
}
