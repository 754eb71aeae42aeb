package pgtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// A server backend's CPU stays counted after its connection closed and
// the backend ended: a benchmark that times a whole tilectl process sees
// its backends end with it, and the database's share of that run must
// not vanish with them.
func TestServerCPUKeepsTheCPUOfABackendThatEnded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, ok := pgtest.ServerCPU()
	if !ok {
		t.Fatal("no postgres process on this machine: the benchmarks that read its CPU need one")
	}
	conn, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// Work the backend for a while, then read what it used.
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM generate_series(1, 4000000) g WHERE g % 7 = 3"); err != nil {
		t.Fatal(err)
	}
	used, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if used < 50*time.Millisecond {
		t.Fatalf("the backend used %v of CPU: too little to tell counted from lost", used)
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for { // until the server has reaped the backend
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("backend %d still there: %v", pid, ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	after, _ := pgtest.ServerCPU()
	if got := after - before; got < used-10*time.Millisecond {
		t.Fatalf("the server's CPU grew by %v while a backend that used %v ran and ended", got, used)
	}
}

// processCPU is the user and system CPU of one process, from /proc.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond, nil
}
