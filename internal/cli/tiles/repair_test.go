package tiles

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
)

// copyDir copies the testdata tiles to a directory the test may change.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(to, filepath.Dir(rel)), 0o700); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

func TestImportingAgainRestoresMissingAndDamagedBlobsOfRecordedTiles(t *testing.T) {
	e := newEnv(t)
	if _, err := e.importDir(tilesDir, "flt-r", false); err != nil {
		t.Fatal(err)
	}
	var gone, damaged string
	rows, err := e.store(t).Pool().Query(context.Background(),
		`SELECT blob_path FROM tiles WHERE flight_id = 'flt-r' ORDER BY tile_id LIMIT 2`)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for rows.Next() {
		var p string
		_ = rows.Scan(&p)
		paths = append(paths, filepath.Join(e.cache, filepath.FromSlash(p)))
	}
	rows.Close()
	gone, damaged = paths[0], paths[1]
	want, _ := os.ReadFile(damaged)
	wantGone := mustRead(t, gone)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(want)
	bad[len(bad)-1] ^= 0xff
	if err := os.WriteFile(damaged, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := e.importDir(tilesDir, "flt-r", false)
	if err != nil {
		t.Fatalf("re-import: %v", err)
	}
	if sum.Repaired != 2 || sum.AlreadyPresent != 48 || sum.Imported != 0 {
		t.Fatalf("summary %+v, want 2 repaired of 48 present", sum)
	}
	for p, w := range map[string][]byte{gone: wantGone, damaged: want} {
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("blob %s not restored: %v", p, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("blob %s mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
	// A third import finds nothing to repair.
	if sum, err := e.importDir(tilesDir, "flt-r", false); err != nil || sum.Repaired != 0 {
		t.Fatalf("third import: %+v, %v; want nothing repaired", sum, err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAFileWithOtherBytesThanItsRecordedTileIsAnErrorNamingBothHashes(t *testing.T) {
	e := newEnv(t)
	dir := copyDir(t, tilesDir)
	sum, err := e.importDir(dir, "flt-m", false)
	if err != nil {
		t.Fatal(err)
	}
	var id, rel, recorded string
	if err := e.store(t).Pool().QueryRow(context.Background(),
		`SELECT tile_id, blob_path, sha256 FROM tiles WHERE flight_id = 'flt-m' ORDER BY tile_id LIMIT 1`).Scan(&id, &rel, &recorded); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(e.cache, filepath.FromSlash(rel))
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	// The same tile, other (valid PNG) bytes: a different tile from
	// the testdata under this tile's path.
	parts := strings.Split(rel, "/") // flight/z/x/y.png
	src := filepath.Join(dir, parts[1], parts[2], parts[3])
	var other string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if other == "" && err == nil && !d.IsDir() && p != src {
			other = p
		}
		return nil
	})
	if err := os.WriteFile(src, mustRead(t, other), 0o600); err != nil {
		t.Fatal(err)
	}
	sum, err = e.importDir(dir, "flt-m", false)
	if exitcode.Code(err) != exitcode.Failure || len(sum.Mismatched) != 1 {
		t.Fatalf("import: %v (exit %d), summary %+v; want exit 1 and one mismatch", err, exitcode.Code(err), sum)
	}
	m := sum.Mismatched[0]
	if m.TileID != id || m.RecordedSHA256 != recorded || m.FileSHA256 == recorded ||
		!strings.Contains(e.errOut.String(), recorded) || !strings.Contains(e.errOut.String(), m.FileSHA256) {
		t.Errorf("mismatch %+v, stderr %q; want both hashes named", m, e.errOut)
	}
	var still string
	if err := e.store(t).Pool().QueryRow(context.Background(), `SELECT sha256 FROM tiles WHERE tile_id = $1`, id).Scan(&still); err != nil || still != recorded {
		t.Errorf("record sha256 %s (%v), want it kept as %s", still, err, recorded)
	}
	if _, err := os.Stat(blob); err == nil {
		t.Errorf("a blob was written from the other file")
	}
}
