package tilestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RunState is what this machine can prove about another run.
type RunState int

const (
	// RunUnknown: nothing proves the run alive or dead (it ran on another
	// machine, with another cache dir, or left no lock file): its leases
	// decide.
	RunUnknown RunState = iota
	// RunAlive: a process holds the run's lock.
	RunAlive
	// RunDead: the run's lock file exists and no process holds its lock:
	// the kernel drops a flock when its holder dies, whatever becomes of
	// its PID, so the run has ended.
	RunDead
)

func (s RunState) String() string {
	switch s {
	case RunAlive:
		return "alive"
	case RunDead:
		return "dead"
	}
	return "unknown"
}

// RunLocks is the directory of per-run lock files on this machine
// (runs/ in the cache dir). Each upload run holds an exclusive flock(2) on
// its own file, named after its run ID, for its whole life, before it
// claims any batch: another run on this machine that can take that lock
// knows the run is gone, which a PID cannot tell (PIDs are reused).
type RunLocks struct {
	dir string
}

// NewRunLocks returns the lock directory runs/ under cacheDir.
func NewRunLocks(cacheDir string) RunLocks {
	return RunLocks{dir: filepath.Join(cacheDir, "runs")}
}

// Dir is the lock directory.
func (l RunLocks) Dir() string { return l.dir }

func (l RunLocks) path(runID string) (string, error) {
	if runID == "" || strings.ContainsAny(runID, `/\.`) || len(runID) > 128 {
		return "", fmt.Errorf("run ID %q cannot name a lock file", runID)
	}
	return filepath.Join(l.dir, runID+".lock"), nil
}

// RunLock is this run's held lock.
type RunLock struct {
	f    *os.File
	path string
}

// Hold creates run runID's lock file and takes its lock for as long as
// the process lives or until Release. It fails when another process holds
// it (a run ID is never shared).
func (l RunLocks) Hold(runID string) (*RunLock, error) {
	path, err := l.path(runID)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the run lock directory %s: %w", l.dir, err)
	}
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create the run lock %s: %w", path, err)
		}
		if err := flockNB(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock the run lock %s: %w", path, err)
		}
		// A prune between the open and the lock may have removed the
		// file: a lock on an unlinked file proves nothing to others.
		if same, err := samePath(f, path); err != nil || !same {
			f.Close()
			continue
		}
		host, _ := os.Hostname()
		_ = f.Truncate(0)
		_, _ = fmt.Fprintf(f, "run %s host %s pid %d started %s\n", runID, host, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
		return &RunLock{f: f, path: path}, nil
	}
	return nil, fmt.Errorf("lock the run lock %s: it kept being removed", path)
}

// Release removes the lock file and drops the lock. Safe to call twice.
func (r *RunLock) Release() error {
	if r == nil || r.f == nil {
		return nil
	}
	// Removed while still locked: no other run takes a removed file for a
	// dead run's.
	err := os.Remove(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	r.f = nil
	if err != nil {
		return fmt.Errorf("remove the run lock %s: %w", r.path, err)
	}
	return nil
}

// State tells whether run runID, which ran on this machine, is alive:
// RunAlive when a process holds its lock, RunDead when its file exists and
// the lock is free, RunUnknown when there is no file.
func (l RunLocks) State(runID string) (RunState, error) {
	path, err := l.path(runID)
	if err != nil {
		return RunUnknown, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return RunUnknown, nil
	}
	if err != nil {
		return RunUnknown, fmt.Errorf("open the run lock %s: %w", path, err)
	}
	defer f.Close()
	switch err := flockNB(f); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return RunAlive, nil
	case err != nil:
		return RunUnknown, fmt.Errorf("test the run lock %s: %w", path, err)
	}
	return RunDead, nil
}

// Prune removes the lock files whose lock is free (their runs ended
// without removing them) and whose run keep does not name, and returns how
// many it removed. A caller keeps the runs that still hold open batches:
// their files are what proves them dead to the next run of a flight.
func (l RunLocks) Prune(keep func(runID string) bool) (int, error) {
	ents, err := os.ReadDir(l.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list the run locks in %s: %w", l.dir, err)
	}
	n := 0
	for _, e := range ents {
		runID, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || !e.Type().IsRegular() || (keep != nil && keep(runID)) {
			continue
		}
		path := filepath.Join(l.dir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if flockNB(f) == nil {
			if same, _ := samePath(f, path); same && os.Remove(path) == nil {
				n++
			}
		}
		f.Close()
	}
	return n, nil
}

// flockNB takes an exclusive flock on f without waiting.
func flockNB(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			return err
		}
	}
}

// samePath reports whether path still names f's file.
func samePath(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
}
