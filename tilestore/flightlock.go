package tilestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// flightLockDir holds one lock file per flight in the cache root. Its name
// starts with a dot, which no flight ID does, so it never meets a flight's
// blob directory.
const flightLockDir = ".flights"

// ErrFlightCacheBusy is returned by LockFlight when another process holds
// the flight's cache lock in a mode that excludes the one asked for.
var ErrFlightCacheBusy = errors.New("another tilectl process is using the flight's cache directory")

// FlightLock is a held flock(2) on a flight's cache lock file. tiles import
// holds it shared while it writes the flight's blobs; flights delete holds
// it exclusive while it removes them, so a delete never removes the blobs
// of tiles an import is about to record, and an import never writes into a
// directory a delete is removing. The kernel drops it when its holder dies.
type FlightLock struct{ f *os.File }

// LockFlight takes the flight's cache lock without waiting: exclusive for
// a delete, shared for an import. ErrFlightCacheBusy when it is held in a
// mode that excludes this one.
func (b *BlobStore) LockFlight(flightID string, exclusive bool) (*FlightLock, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return nil, err
	}
	if err := b.dir.MkdirAll(flightLockDir, 0o700); err != nil {
		return nil, fmt.Errorf("make the flight lock directory %s: %w", filepath.Join(b.root, flightLockDir), err)
	}
	name := path.Join(flightLockDir, flightID+".lock")
	f, err := b.dir.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the flight lock %s: %w", filepath.Join(b.root, name), err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, fmt.Errorf("flight %s (lock %s): %w", flightID, filepath.Join(b.root, name), ErrFlightCacheBusy)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the flight lock %s: %w", filepath.Join(b.root, name), err)
	}
	return &FlightLock{f: f}, nil
}

// Release drops the lock. The file stays: removing it would let a process
// that opened it before the removal lock a file no one else sees.
func (l *FlightLock) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// RemovedFiles is what a removal from the cache freed.
type RemovedFiles struct {
	Files     int64
	DiskBytes int64 // allocated blocks of the removed files
	Dirs      int64
}

// RemoveFlightDir removes the flight's blob directory (<root>/<flight>)
// and everything under it, and says what it freed. dryRun only measures.
// The caller holds the flight's lock exclusive.
func (b *BlobStore) RemoveFlightDir(flightID string, dryRun bool) (RemovedFiles, error) {
	var out RemovedFiles
	if err := ValidateFlightID(flightID); err != nil {
		return out, err
	}
	err := fs.WalkDir(b.dir.FS(), flightID, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			out.Dirs++
			return nil
		}
		out.Files++
		if st, err := d.Info(); err == nil {
			out.DiskBytes += allocated(st)
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("measure the blob directory %s: %w", filepath.Join(b.root, flightID), err)
	}
	if dryRun {
		return out, nil
	}
	if err := b.dir.RemoveAll(flightID); err != nil {
		return out, fmt.Errorf("remove the blob directory %s: %w", filepath.Join(b.root, flightID), err)
	}
	return out, nil
}

// RemoveBlobs removes the blobs at paths (relative to the root) that are
// still there, and says what it freed: for blobs a flight's tiles named
// outside its own directory.
func (b *BlobStore) RemoveBlobs(paths []string) (RemovedFiles, error) {
	var out RemovedFiles
	for _, p := range paths {
		disk, found, err := removeBlob(b, p, false)
		if err != nil {
			return out, err
		}
		if found {
			out.Files++
			out.DiskBytes += disk
		}
	}
	return out, nil
}

// RemoveEmptyDirs removes the empty directories under the flight's blob
// directory, deepest first, the flight's directory included when it ends
// up empty, and returns how many it removed. A directory that is not
// empty is left. The caller holds the flight's lock exclusive, so no
// import is writing into them.
func (b *BlobStore) RemoveEmptyDirs(flightID string) (int64, error) {
	if err := ValidateFlightID(flightID); err != nil {
		return 0, err
	}
	var dirs []string
	err := fs.WalkDir(b.dir.FS(), flightID, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list the blob directories of flight %s: %w", flightID, err)
	}
	var n int64
	for i := len(dirs) - 1; i >= 0; i-- { // WalkDir lists a directory before its children
		if b.dir.Remove(filepath.FromSlash(dirs[i])) == nil {
			n++
		}
	}
	return n, nil
}
