package tiles

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
)

// smallFS mounts a tmpfs of size bytes and returns its directory. The
// disk-space tests run on a real small filesystem, not an injected error:
// the tests run as root (make test and CI do), where mount works, so a
// failed mount fails the test instead of skipping it.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a %s tmpfs at %s (the disk-space tests need root): %v: %s", size, dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

func resize(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s with size %s: %v: %s", dir, size, err, out)
	}
}

// writeBigTiles writes n PNG tiles of about kib KiB each (random bytes in
// an ancillary chunk after a valid header, so they do not compress) at
// 12/x/y.png under dir.
func writeBigTiles(t *testing.T, dir string, n, kib int) {
	t.Helper()
	base, err := os.ReadFile(testbin.WriteTile(t, t.TempDir(), 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		pad := make([]byte, kib<<10)
		rand.Read(pad)
		// base is IHDR..IEND; the bytes after IEND are ignored by decoders
		// and still copied and hashed whole.
		body := append(append([]byte{}, base...), pad...)
		p := filepath.Join(dir, "12", fmt.Sprint(i/50), fmt.Sprintf("%d.png", i%50))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

type importRun struct {
	exit           int
	stdout, stderr string
}

func runImport(t *testing.T, env []string, args ...string) importRun {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(testbin.Tilectl(t), args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	testbin.RunFor(t, cmd, 2*time.Minute)
	return importRun{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

func countRows(t *testing.T, url, sql string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func stationEnv(t *testing.T, cache string, extra ...string) (env []string, db string) {
	db = pgtest.NewURL(t)
	env = append(testbin.Environ("XDG_", "HOME="), "HOME="+t.TempDir(), "TILECTL_DATABASE_URL="+db,
		"TILECTL_CACHE_DIR="+cache, "TILECTL_FDR_PATH="+filepath.Join(t.TempDir(), "fdr.ring"))
	env = append(env, extra...)
	runImport(t, env, "migrate", "up")
	return env, db
}

func TestImportRefusesBeforeWritingAnythingWhenTheCacheWouldKeepLessThanMinFree(t *testing.T) {
	fsDir := smallFS(t, "8m")
	cache := filepath.Join(fsDir, "cache")
	src := t.TempDir()
	writeBigTiles(t, src, 40, 64) // about 2.6 MiB
	// The default reserve (the larger of 1 GiB and 5%) is more than the
	// whole filesystem.
	env, db := stationEnv(t, cache)
	r := runImport(t, env, "tiles", "import", "--flight", "F1", src)
	if r.exit != 1 || !strings.Contains(r.stderr, "not enough free space for the import in the cache "+cache) ||
		!strings.Contains(r.stderr, "the reserve of 1.0 GiB") || !strings.Contains(r.stderr, "cache.min_free the larger of 1 GiB and 5% of the filesystem, from default") {
		t.Fatalf("import on an 8 MiB filesystem with the default reserve: exit %d\n%s", r.exit, r.stderr)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Fatal("the refused import created the cache")
	}
	if n := countRows(t, db, `SELECT count(*) FROM flights`); n != 0 {
		t.Fatalf("the refused import recorded %d flights", n)
	}
	// A reserve set in bytes that the tiles would eat into: refused, naming it.
	env = append(env, "TILECTL_CACHE_MIN_FREE=6M")
	if r := runImport(t, env, "tiles", "import", "--flight", "F1", src); r.exit != 1 ||
		!strings.Contains(r.stderr, "cache.min_free 6291456 bytes, from env TILECTL_CACHE_MIN_FREE") {
		t.Fatalf("import with min_free 6M: exit %d\n%s", r.exit, r.stderr)
	}
	// One that leaves room: imported.
	env = append(env, "TILECTL_CACHE_MIN_FREE=10%")
	if r := runImport(t, env, "tiles", "import", "--flight", "F1", src); r.exit != 0 {
		t.Fatalf("import with min_free 10%%: exit %d\n%s", r.exit, r.stderr)
	}
	if n := countRows(t, db, `SELECT count(*) FROM tiles`); n != 40 {
		t.Fatalf("%d tiles recorded, want 40", n)
	}
}

// The filesystem has room for the bytes (the check before writing
// passes) but not for the files: a tmpfs with 50 inodes, which runs out
// part way (ENOSPC from the kernel, as a full disk gives).
func TestAFullDiskMidImportRecordsOnlyWholeChunksAndTheNextImportCompletes(t *testing.T) {
	fsDir := smallFS(t, "16m,nr_inodes=50")
	cache := filepath.Join(fsDir, "cache")
	src := t.TempDir()
	writeBigTiles(t, src, 80, 16)
	env, db := stationEnv(t, cache, "TILECTL_CACHE_MIN_FREE=0")
	r := runImport(t, env, "tiles", "import", "--flight", "F1", "--batch-size", "10", src)
	if r.exit != 1 || !strings.Contains(r.stderr, "the cache's filesystem is full (cache "+cache) ||
		!strings.Contains(r.stderr, "no space left on device") || !strings.Contains(r.stderr, "run the same import again") {
		t.Fatalf("import onto a filesystem of 50 inodes: exit %d\n%s", r.exit, r.stderr)
	}
	n := countRows(t, db, `SELECT count(*) FROM tiles`)
	if n == 0 || n%10 != 0 || n >= 80 {
		t.Fatalf("%d tiles recorded after the disk filled, want whole chunks of 10, fewer than 80", n)
	}
	// Every recorded tile's blob is whole; no unrecorded blob is left.
	files := 0
	_ = filepath.Walk(filepath.Join(cache, "F1"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			files++
		}
		return nil
	})
	if int64(files) != n {
		t.Fatalf("%d blob files for %d recorded tiles", files, n)
	}
	if v := runImport(t, env, "tiles", "verify", "--flight", "F1"); v.exit != 0 {
		t.Fatalf("verify after the full disk: exit %d\n%s%s", v.exit, v.stdout, v.stderr)
	}
	resize(t, fsDir, "16m,nr_inodes=1000")
	if r := runImport(t, env, "tiles", "import", "--flight", "F1", "--batch-size", "10", src); r.exit != 0 {
		t.Fatalf("the next import: exit %d\n%s", r.exit, r.stderr)
	}
	if n := countRows(t, db, `SELECT count(*) FROM tiles`); n != 80 {
		t.Fatalf("%d tiles after the next import, want 80", n)
	}
	if v := runImport(t, env, "tiles", "verify", "--flight", "F1"); v.exit != 0 {
		t.Fatalf("verify after the next import: exit %d\n%s%s", v.exit, v.stdout, v.stderr)
	}
}
