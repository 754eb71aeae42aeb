package security

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostileIDs are flight IDs that must never reach SQL text, a file path, a
// URL or a log line unchecked.
var hostileIDs = []string{
	`a'b`,
	`x"; DROP TABLE tiles; --`,
	`f1'); DELETE FROM flights; --`,
	`../../etc`,
	`a/b`,
	`a\b`,
	"a\nb",
	"a\tb",
	"a\x1b[31mred",
	"a\u202eb",
	".hidden",
	"-rf",
	"",
	strings.Repeat("x", 200),
}

// TestHostileFlightIDsAreRejectedAtImport imports a valid tile directory
// under each hostile flight ID: the import must fail with an error that
// says the ID is invalid, and leave the database as it was.
func TestHostileFlightIDsAreRejectedAtImport(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1", "ids-token-0123456789")
	c.mustRun("migrate", "up")
	dir := t.TempDir()
	writeTiles(t, dir, 2)
	for _, id := range hostileIDs {
		r := c.run(time.Minute, "tiles", "import", "--flight="+id, dir)
		if r.exit == 0 {
			t.Errorf("import with flight ID %q succeeded", id)
			continue
		}
		if !strings.Contains(strings.ToLower(r.stderr), "flight") {
			t.Errorf("import with flight ID %q: the error does not name the flight ID:\n%s", id, r.stderr)
		}
	}
	if n := c.count(`SELECT count(*) FROM flights`); n != 0 {
		t.Errorf("%d flights exist after only hostile imports", n)
	}
	if n := c.count(`SELECT count(*) FROM tiles`); n != 0 {
		t.Errorf("%d tiles exist after only hostile imports", n)
	}
	// The schema is intact: a good import still works.
	c.mustRun("tiles", "import", "--flight", "good-flight", dir)
	if n := c.count(`SELECT count(*) FROM tiles WHERE flight_id = 'good-flight'`); n != 2 {
		t.Errorf("a valid import after the hostile ones stored %d of 2 tiles", n)
	}
}

// TestHostileTilePathsAreRefusedOrConfined imports a directory whose tile
// file names carry quotes, SQL, control characters and a symlink out of
// the directory: whatever import does with them, every stored tile ID is
// plain, every blob stays under the cache, and no file outside the import
// directory is read into it.
func TestHostileTilePathsAreRefusedOrConfined(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1", "ids-token-0123456789")
	c.mustRun("migrate", "up")
	dir := t.TempDir()
	writeTiles(t, dir, 2)
	good, err := os.ReadFile(filepath.Join(dir, "10", "0", "7.png"))
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "outside.png")
	if err := os.WriteFile(secret, append(append([]byte(nil), good...), []byte("OUTSIDE-SECRET")...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`3'; DROP TABLE tiles; --.png`, "4\n.png", `5".png`, "6\x1b.png"} {
		if err := os.WriteFile(filepath.Join(dir, "10", "1", name), good, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "10", `9'; --`), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10", `9'; --`, "1.png"), good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "10", "1", "8.png")); err != nil {
		t.Fatal(err)
	}

	r := c.run(time.Minute, "tiles", "import", "--flight", "paths", dir)
	t.Logf("import exit %d\nstderr: %q", r.exit, clipped(r.stderr))
	if r.exit != 0 && !strings.Contains(strings.ToLower(r.stderr), "tile") && !strings.Contains(r.stderr, "invalid") {
		t.Errorf("import refused the directory without saying why:\n%s", r.stderr)
	}
	// Import what is valid, so the checks below see what import does with
	// the rest (the symlink in particular).
	r = c.run(time.Minute, "tiles", "import", "--flight", "paths", "--skip-invalid", dir)
	t.Logf("import --skip-invalid exit %d", r.exit)
	if n := c.count(`SELECT count(*) FROM tiles WHERE flight_id = 'paths'`); n < 2 {
		t.Errorf("--skip-invalid imported %d tiles, want at least the 2 valid ones", n)
	}
	if n := c.count(`SELECT count(*) FROM tiles WHERE tile_id !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'`); n != 0 {
		t.Errorf("%d tiles stored with IDs outside [A-Za-z0-9._-]", n)
	}
	if n := c.count(`SELECT count(*) FROM tiles WHERE blob_path LIKE '/%' OR blob_path LIKE '%..%'`); n != 0 {
		t.Errorf("%d tiles with blob paths that leave the cache", n)
	}
	_ = filepath.WalkDir(c.cache, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if d.Type()&os.ModeSymlink != 0 {
			t.Errorf("cache holds a symlink %s", p)
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "OUTSIDE-SECRET") {
			t.Errorf("the import copied a file from outside its directory (through a symlink) into %s", p)
		}
		return nil
	})
}

// TestImportErrorsDoNotEchoControlCharacters imports a file whose name
// holds an ANSI escape and a carriage return: the error names the file, but
// must show those bytes escaped, so a crafted file name cannot rewrite the
// operator's terminal or forge a log line.
func TestImportErrorsDoNotEchoControlCharacters(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1", "ids-token-0123456789")
	c.mustRun("migrate", "up")
	dir := t.TempDir()
	writeTiles(t, dir, 1)
	for _, name := range []string{"6\x1b[2J.png", "7\rFORGED.png", "8\nFORGED.png"} {
		if err := os.WriteFile(filepath.Join(dir, "10", "0", name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := c.run(time.Minute, "tiles", "import", "--flight", "ctl", dir)
	if r.exit == 0 {
		t.Fatalf("import of invalid file names succeeded")
	}
	for _, out := range []string{r.stdout, r.stderr} {
		if strings.ContainsAny(out, "\x1b\r") {
			t.Errorf("tilectl printed a raw escape or carriage return from a file name: %q", out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "FORGED") {
				t.Errorf("a newline in a file name started a new output line: %q", out)
			}
		}
	}
}
