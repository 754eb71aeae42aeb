package pgtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ServerCPU is the CPU time (user and system) every postgres process on
// this machine has used so far (all databases, autovacuum and the WAL
// writer included), read from /proc, so a benchmark can report the
// database's side of its cost next to its own: on a machine shared with
// the server the two compete for the same cores. ok is false where it
// cannot say (no /proc, or no postgres process here: a server on another
// machine); a caller then reports nothing rather than 0.
func ServerCPU() (cpu time.Duration, ok bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	seen := false
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended meanwhile
		}
		s := string(b)
		// pid (comm) state ppid ...: comm may hold spaces, so split after it.
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(postgres") {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		seen = true
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += utime + stime
	}
	return time.Duration(ticks) * (time.Second / clockTicks), seen
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go runs on.
const clockTicks = 100
