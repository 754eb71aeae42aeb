package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pgUser owns the throwaway cluster when the soak runs as root: initdb and
// postgres refuse to run as root (the same user scripts/pg.sh uses).
const pgUser = "tilectl-pg"

// cluster is a throwaway PostgreSQL cluster the soak starts itself, so it
// can restart the database under tilectl and the provider.
type cluster struct {
	dir    string // removed by stop
	data   string
	port   int
	pgctl  string
	cred   *syscall.Credential // nil: run as ourselves
	logOut string
}

// startCluster runs initdb and pg_ctl start on a free loopback port under
// a new temporary directory.
func startCluster(ctx context.Context) (*cluster, error) {
	initdb, err := findPGBin("initdb")
	if err != nil {
		return nil, err
	}
	pgctl, err := findPGBin("pg_ctl")
	if err != nil {
		return nil, err
	}
	c := &cluster{pgctl: pgctl}
	if os.Geteuid() == 0 {
		if c.cred, err = pgCredential(ctx); err != nil {
			return nil, err
		}
	}
	if c.dir, err = os.MkdirTemp("", "tilechaos-pg-"); err != nil {
		return nil, fmt.Errorf("make cluster directory: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			c.stop()
			return nil, fmt.Errorf("hand the cluster directory to %s: %w", pgUser, err)
		}
	}
	c.data = filepath.Join(c.dir, "data")
	c.logOut = filepath.Join(c.dir, "server.log")
	addr, err := freeAddr()
	if err != nil {
		c.stop()
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	c.port, _ = strconv.Atoi(port)
	if out, err := c.run(ctx, initdb, "-D", c.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		c.stop()
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	// fsync off: an immediate restart kills the server, not the machine,
	// so what it wrote is still in the page cache for crash recovery.
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100", c.port, c.dir)
	if out, err := c.run(ctx, pgctl, "-D", c.data, "-l", c.logOut, "-w", "-t", "60", "-o", opts, "start"); err != nil {
		c.stop()
		return nil, fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, c.serverLog())
	}
	return c, nil
}

// adminURL is the cluster's superuser URL.
func (c *cluster) adminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// restart stops the server at once, as a crash would (-m immediate: no
// checkpoint, every session cut), and starts it again with crash recovery;
// it returns when the server accepts connections.
func (c *cluster) restart(ctx context.Context) error {
	if out, err := c.run(ctx, c.pgctl, "-D", c.data, "-l", c.logOut, "-m", "immediate", "-w", "-t", "60", "restart"); err != nil {
		return fmt.Errorf("pg_ctl restart -m immediate: %w\n%s\n%s", err, out, c.serverLog())
	}
	return nil
}

// stop kills the server and deletes the cluster. It uses its own context so
// that a cancelled soak still cleans up.
func (c *cluster) stop() {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.run(ctx, c.pgctl, "-D", c.data, "-m", "immediate", "-w", "stop")
	}
	_ = os.RemoveAll(c.dir)
}

func (c *cluster) run(ctx context.Context, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd.CombinedOutput()
}

func (c *cluster) serverLog() string {
	b, _ := os.ReadFile(c.logOut)
	return string(tail(b, 2000))
}

// findPGBin finds a PostgreSQL server program on PATH or in the usual
// Debian and source-install places, newest version first.
func findPGBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	dirs = append(dirs, "/usr/local/pgsql/bin", "/usr/local/bin")
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("the chaos soak starts its own PostgreSQL cluster and needs %s: install the PostgreSQL server (apt-get install postgresql)", name)
}

func pgVersion(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// pgCredential is the uid/gid of pgUser, created as a system user when it
// does not exist yet.
func pgCredential(ctx context.Context) (*syscall.Credential, error) {
	u, err := user.Lookup(pgUser)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		out, uerr := exec.CommandContext(ctx, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", pgUser).CombinedOutput()
		if uerr != nil && !strings.Contains(string(out), "already exists") {
			return nil, fmt.Errorf("create user %s for the throwaway cluster (initdb refuses root): %w\n%s", pgUser, uerr, out)
		}
		u, err = user.Lookup(pgUser)
	}
	if err != nil {
		return nil, fmt.Errorf("look up user %s: %w", pgUser, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
