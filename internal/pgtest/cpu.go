package pgtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ServerCPU is the CPU time (user and system) the machine's postgres
// processes have used so far, read from /proc, so a benchmark can report
// the database's side of its cost next to its own: on a machine shared with
// the server the two compete for the same cores. It is 0 where /proc cannot
// say (no Linux, or a server on another machine).
func ServerCPU() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
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
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += utime + stime
	}
	return time.Duration(ticks) * (time.Second / clockTicks)
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go runs on.
const clockTicks = 100
