package tiles

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The checkpoint of a reconcile pass lives in the cache directory, not in
// the database: it is one machine's progress through one command, it is
// written once per page (a database write per page would load the store a
// pass is meant to leave alone), it needs no schema, and losing it costs a
// re-check, never a wrong answer. A pass that completes removes it.
//
// Two files per flight under <cache_dir>/reconcile/: <flight>.findings
// (one JSON finding per line, appended and synced page by page) and
// <flight>.json (the checkpoint: the last tile ID of the last page whose
// findings are on disk, the counts so far, and the findings file's length
// then). The checkpoint is replaced atomically after the findings it
// counts are synced, so a crash between the two leaves findings past the
// checkpoint's length, which the next pass cuts off before it appends.

// reconcileCheckpoint is <flight>.json.
type reconcileCheckpoint struct {
	FlightID      string    `json:"flight_id"`
	After         string    `json:"after_tile_id"`
	Checked       int       `json:"checked"`
	Held          int       `json:"held"`
	FindingsBytes int64     `json:"findings_bytes"`
	StartedAt     time.Time `json:"started_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// checkpointDir keeps one flight's reconcile progress.
type checkpointDir struct {
	dir, flight string
}

func newCheckpointDir(cacheDir, flight string) checkpointDir {
	return checkpointDir{dir: filepath.Join(cacheDir, "reconcile"), flight: flight}
}

func (c checkpointDir) checkpointPath() string { return filepath.Join(c.dir, c.flight+".json") }
func (c checkpointDir) findingsPath() string   { return filepath.Join(c.dir, c.flight+".findings") }

// load returns the checkpoint of an unfinished pass and its findings, or
// ok false when there is none.
func (c checkpointDir) load() (cp reconcileCheckpoint, findings []ReconcileFinding, ok bool, err error) {
	b, err := os.ReadFile(c.checkpointPath())
	if errors.Is(err, fs.ErrNotExist) {
		return cp, nil, false, nil
	}
	if err != nil {
		return cp, nil, false, fmt.Errorf("read the reconcile checkpoint %s: %w", c.checkpointPath(), err)
	}
	if err := json.Unmarshal(b, &cp); err != nil || cp.FlightID != c.flight {
		return cp, nil, false, fmt.Errorf("the reconcile checkpoint %s is damaged (%v): remove it, or pass --restart", c.checkpointPath(), err)
	}
	f, err := os.OpenFile(c.findingsPath(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return cp, nil, false, fmt.Errorf("open the reconcile findings %s: %w", c.findingsPath(), err)
	}
	defer f.Close()
	// Findings appended after the checkpoint was last written belong to a
	// page that is checked again.
	if err := f.Truncate(cp.FindingsBytes); err != nil {
		return cp, nil, false, fmt.Errorf("cut the reconcile findings %s to the checkpoint: %w", c.findingsPath(), err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var fd ReconcileFinding
		if err := json.Unmarshal(sc.Bytes(), &fd); err != nil {
			return cp, nil, false, fmt.Errorf("the reconcile findings %s are damaged: remove them and the checkpoint, or pass --restart", c.findingsPath())
		}
		findings = append(findings, fd)
	}
	if err := sc.Err(); err != nil {
		return cp, nil, false, fmt.Errorf("read the reconcile findings %s: %w", c.findingsPath(), err)
	}
	return cp, findings, true, nil
}

// save appends a page's findings, syncs them, then replaces the
// checkpoint with cp (its FindingsBytes set here).
func (c checkpointDir) save(cp *reconcileCheckpoint, page []ReconcileFinding) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", c.dir, err)
	}
	f, err := os.OpenFile(c.findingsPath(), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open the reconcile findings %s: %w", c.findingsPath(), err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	if _, err := f.Seek(cp.FindingsBytes, 0); err != nil {
		return fmt.Errorf("seek in the reconcile findings %s: %w", c.findingsPath(), err)
	}
	enc := json.NewEncoder(w)
	for _, fd := range page {
		if err := enc.Encode(fd); err != nil {
			return fmt.Errorf("write the reconcile findings %s: %w", c.findingsPath(), err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write the reconcile findings %s: %w", c.findingsPath(), err)
	}
	if len(page) > 0 {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync the reconcile findings %s: %w", c.findingsPath(), err)
		}
	}
	end, err := f.Seek(0, 1)
	if err != nil {
		return fmt.Errorf("the reconcile findings %s: %w", c.findingsPath(), err)
	}
	cp.FindingsBytes = end
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	tmp := c.checkpointPath() + ".tmp"
	if err := writeSynced(tmp, b); err != nil {
		return fmt.Errorf("write the reconcile checkpoint %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, c.checkpointPath()); err != nil {
		return fmt.Errorf("replace the reconcile checkpoint %s: %w", c.checkpointPath(), err)
	}
	return nil
}

// remove drops the flight's checkpoint and findings: the pass completed,
// or --restart asked to start over.
func (c checkpointDir) remove() error {
	var errs []error
	for _, p := range []string{c.checkpointPath(), c.findingsPath()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the reconcile checkpoint: %w", err)
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
