package scaleout_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/testbin"
)

// pgbouncerUser runs PgBouncer when the tests run as root (it refuses to
// run as root); scripts/pg.sh's throwaway cluster uses the same user.
const pgbouncerUser = "tilectl-pg"

// throughPgBouncer starts PgBouncer from the installed binary in
// transaction pooling mode on a free port, in front of dbURL's server, and
// returns dbURL rewritten to go through it, with the pgx setting a
// transaction-mode pooler needs (no named prepared statements). A missing
// binary fails the test: make test installs it.
func throughPgBouncer(t testing.TB, dbURL string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		t.Fatal("pgbouncer is not installed: apt-get install pgbouncer (make test installs it when it can)")
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "tilectl-pgbouncer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	addr := testbin.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	user := u.User.Username()
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s user=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 400
default_pool_size = 8
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = %s
`, u.Hostname(), u.Port(), user, port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"))
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("pgbouncer.ini", ini)
	write("users.txt", fmt.Sprintf("%q \"\"\n", user))
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	// pgbouncer itself is the child (no runuser in between), in its own
	// process group, so the cleanup's kill reaches it: killing a wrapper
	// left pgbouncer running after the tests.
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		uid, gid := ensureUser(t)
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "users.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	q := u.Query()
	// PgBouncer 1.18 in transaction mode cannot keep a named prepared
	// statement across transactions: pgx's default statement cache breaks.
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	u.Host = addr
	pooled := u.String()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, pooled)
		if err == nil {
			var one int
			err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
			_ = conn.Close(ctx)
			cancel()
			if err == nil {
				return pooled
			}
		} else {
			cancel()
		}
		select {
		case werr := <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited (%v):\n%s", werr, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer did not answer within 15s: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ensureUser returns the unprivileged user's uid and gid, creating the user
// as scripts/pg.sh does when it is missing.
func ensureUser(t testing.TB) (int, int) {
	t.Helper()
	u, err := user.Lookup(pgbouncerUser)
	if err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", pgbouncerUser).CombinedOutput(); err != nil {
			t.Fatalf("create user %s to run pgbouncer: %v\n%s", pgbouncerUser, err, out)
		}
		if u, err = user.Lookup(pgbouncerUser); err != nil {
			t.Fatal(err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid
}
