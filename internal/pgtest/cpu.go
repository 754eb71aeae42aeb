package pgtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ServerCPU is the CPU time (user and system) every postgres process on
// this machine has used so far (all databases, autovacuum, the WAL writer
// and backends that have ended included), read from /proc, so a benchmark can report the
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
		if len(f) < 15 {
			continue
		}
		seen = true
		// utime, stime, and cutime, cstime: the CPU of the process's
		// children that ended and were reaped. The server's backends are
		// the postmaster's children, so a backend's CPU stays counted
		// after its connection closed, as it does when a whole tilectl
		// process and its connections end.
		for _, v := range f[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * (time.Second / clockTicks), seen
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go runs on.
const clockTicks = 100
