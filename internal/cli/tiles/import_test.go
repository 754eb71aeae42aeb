package tiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

const tilesDir = "../../../testdata/tiles"

type env struct {
	f      *factory.Factory
	out    *bytes.Buffer
	errOut *bytes.Buffer
	cache  string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cache := t.TempDir()
	vars := map[string]string{"TILECTL_DATABASE_URL": pgtest.NewURL(t), "TILECTL_CACHE_DIR": cache}
	f := factory.NewWith(ios, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, "test", "")
	t.Cleanup(f.Close)
	return &env{f: f, out: out, errOut: errOut, cache: cache}
}

func (e *env) importDir(dir, flight string, skipInvalid bool) (ImportSummary, error) {
	e.out.Reset()
	e.errOut.Reset()
	err := ImportRun(context.Background(), &ImportOptions{
		IO: e.f.IOStreams, Config: e.f.Config, Store: e.f.Store,
		Dir: dir, FlightID: flight, State: tilestore.FlightOnGround,
		SkipInvalid: skipInvalid, BatchSize: 10, Output: "json",
	})
	var s ImportSummary
	if e.out.Len() > 0 {
		if jerr := json.Unmarshal(e.out.Bytes(), &s); jerr != nil {
			panic(jerr)
		}
	}
	return s, err
}

func (e *env) store(t testing.TB) *tilestore.Store {
	t.Helper()
	s, err := e.f.Store(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestImportRecordsEveryTileWithItsHashAndAPrivateBlob(t *testing.T) {
	e := newEnv(t)
	sum, err := e.importDir(tilesDir, "flt-1", false)
	if err != nil {
		t.Fatalf("import: %v (stderr %s)", err, e.errOut)
	}
	if sum.Found != 48 || sum.Imported != 48 || sum.AlreadyPresent != 0 || sum.Skipped != 0 {
		t.Fatalf("summary %+v, want 48 found and imported", sum)
	}
	ctx := context.Background()
	s := e.store(t)
	fl, err := s.Flight(ctx, "flt-1")
	if err != nil || fl.State != tilestore.FlightOnGround {
		t.Fatalf("flight: %+v, %v", fl, err)
	}
	rows, err := s.Pool().Query(ctx, `SELECT tile_id, z, x, y, sha256, size_bytes, blob_path, content_type, voting_status
		FROM tiles WHERE flight_id = 'flt-1'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, sha, blob, ct, st string
		var z int
		var x, y, size int64
		if err := rows.Scan(&id, &z, &x, &y, &sha, &size, &blob, &ct, &st); err != nil {
			t.Fatal(err)
		}
		n++
		src, err := os.ReadFile(filepath.Join(tilesDir, itoa(z), itoa64(x), itoa64(y)+".png"))
		if err != nil {
			t.Fatalf("%s: no source file: %v", id, err)
		}
		if sum := sha256.Sum256(src); hex.EncodeToString(sum[:]) != sha || int64(len(src)) != size {
			t.Errorf("%s: recorded sha %s size %d do not match the file", id, sha, size)
		}
		if want := "flt-1-" + itoa(z) + "-" + itoa64(x) + "-" + itoa64(y); id != want {
			t.Errorf("tile ID %s, want %s", id, want)
		}
		if ct != "image/png" || st != "pending" {
			t.Errorf("%s: content type %s status %s", id, ct, st)
		}
		p := filepath.Join(e.cache, filepath.FromSlash(blob))
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, src) {
			t.Errorf("%s: blob %s missing or different: %v", id, blob, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: blob mode %v, want 0600", id, fi.Mode().Perm())
		}
	}
	if n != 48 {
		t.Fatalf("%d tiles in the store, want 48", n)
	}
}

func TestReimportIsANoOp(t *testing.T) {
	e := newEnv(t)
	if _, err := e.importDir(tilesDir, "flt-1", false); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(e.cache, "flt-1", "2", "1", "3.png")
	before, err := os.Stat(blob)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := e.importDir(tilesDir, "flt-1", false)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Imported != 0 || sum.AlreadyPresent != 48 {
		t.Fatalf("re-import summary %+v, want 0 imported, 48 already present", sum)
	}
	after, err := os.Stat(blob)
	if err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("re-import rewrote the blob (mtime %v -> %v)", before.ModTime(), after.ModTime())
	}
}

func TestInvalidFilesStopTheImportBeforeAnythingIsWritten(t *testing.T) {
	cases := []struct{ dir, reason string }{
		{"not-an-image", "the extension says .png but the content is not a PNG image (looks like text/plain"},
		{"y-out-of-range", "y 2 is outside 0..1 for zoom 1"},
		{"x-out-of-range", "x 4 is outside 0..3 for zoom 2"},
		{"zoom-too-deep", "zoom 25 is outside 0..24"},
		{"bad-layout", "not in the <z>/<x>/<y>"},
	}
	e := newEnv(t)
	for _, tc := range cases {
		t.Run(tc.dir, func(t *testing.T) {
			dir := filepath.Join("../../../testdata/bad", tc.dir)
			_, err := e.importDir(dir, "flt-bad", false)
			if err == nil || !strings.Contains(err.Error(), "nothing was imported") {
				t.Fatalf("err = %v, want a refusal", err)
			}
			if exitcode.Code(err) != exitcode.Failure {
				t.Errorf("exit code %d, want 1", exitcode.Code(err))
			}
			if !strings.Contains(e.errOut.String(), tc.reason) || !strings.Contains(e.errOut.String(), dir) {
				t.Errorf("stderr %q does not name the file and say %q", e.errOut, tc.reason)
			}
		})
	}
	if _, err := e.store(t).Flight(context.Background(), "flt-bad"); !errors.Is(err, tilestore.ErrFlightNotFound) {
		t.Errorf("a refused import recorded the flight: %v", err)
	}
	entries, _ := os.ReadDir(e.cache)
	if len(entries) != 0 {
		t.Errorf("a refused import wrote to the cache: %v", entries)
	}
}

func TestSkipInvalidImportsTheRestAndExitsOne(t *testing.T) {
	e := newEnv(t)
	sum, err := e.importDir("../../../testdata/bad/mixed", "flt-m", true)
	if exitcode.Code(err) != exitcode.Failure || !strings.Contains(err.Error(), "skipped 1 invalid file") {
		t.Fatalf("err = %v (code %d), want exit 1 naming the skipped count", err, exitcode.Code(err))
	}
	if sum.Found != 3 || sum.Imported != 2 || sum.Skipped != 1 || len(sum.Invalid) != 1 ||
		!strings.HasSuffix(sum.Invalid[0].Path, "2.png") {
		t.Fatalf("summary %+v", sum)
	}
	n, _, err := e.store(t).PendingSummary(context.Background(), "flt-m")
	if err != nil || n != 2 {
		t.Fatalf("pending tiles %d (%v), want 2", n, err)
	}
}

func TestUnreachableDatabaseFailsWithExitOneAndNoWrites(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	cache := t.TempDir()
	vars := map[string]string{"TILECTL_DATABASE_URL": "postgres://postgres@127.0.0.1:1/x?sslmode=disable", "TILECTL_CACHE_DIR": cache}
	f := factory.NewWith(ios, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, "test", "")
	defer f.Close()
	err := ImportRun(context.Background(), &ImportOptions{IO: ios, Config: f.Config, Store: f.Store,
		Dir: tilesDir, FlightID: "f", State: tilestore.FlightOnGround, Output: "text"})
	if err == nil || !strings.Contains(err.Error(), "cannot reach Postgres at 127.0.0.1:1") || exitcode.Code(err) != 1 {
		t.Fatalf("err = %v (code %d)", err, exitcode.Code(err))
	}
	var blobs int
	_ = filepath.WalkDir(cache, func(_ string, d fs.DirEntry, _ error) error {
		if d != nil && !d.IsDir() {
			blobs++
		}
		return nil
	})
	if blobs != 0 {
		t.Fatalf("%d blobs written without a database", blobs)
	}
}
