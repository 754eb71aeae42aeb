package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestUnknownTILECTLVariablesAreFoundWithTheClosestKnownName(t *testing.T) {
	// Built from parts so that the repository scan below does not see them.
	misspelt := EnvPrefix + "UPLOAD_DEADLIN"
	nothingLike := EnvPrefix + "QQQQ_ZZZZ"
	environ := []string{
		misspelt + "=20m",
		nothingLike + "=1",
		"TILECTL_UPLOAD_DEADLINE=20m",                                            // known
		"TILECTL_CONFIG=/etc/x.yaml",                                             // known
		"TILECTL_TEST_DATABASE_URL=postgres://x", "TILECTL_PG_THROWAWAY=/tmp/pg", // the test harness's
		"TILECTL_BENCH_TILES=10",       // the benchmarks'
		"HOME=/root", "XTILECTL_FOO=1", // not ours
	}
	got := UnknownEnv(environ)
	want := []UnknownEnvVar{{Name: nothingLike}, {Name: misspelt, Closest: "TILECTL_UPLOAD_DEADLINE"}}
	if !slices.Equal(got, want) {
		t.Fatalf("UnknownEnv = %+v, want %+v", got, want)
	}
	if s := got[1].String(); !strings.Contains(s, misspelt) || !strings.Contains(s, "did you mean TILECTL_UPLOAD_DEADLINE?") {
		t.Errorf("warning %q does not name the variable and the closest known one", s)
	}
}

// Every TILECTL_ variable the repository sets or documents (Makefile,
// scripts, tests, docs) must be known, or tilectl would warn about it.
func TestEveryTILECTLVariableTheRepositoryUsesIsKnown(t *testing.T) {
	re := regexp.MustCompile(`\bTILECTL_[A-Z0-9_]+`)
	seen := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "demo-run" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		switch ext := filepath.Ext(path); {
		case ext == ".go", ext == ".sh", ext == ".md", ext == ".yml", ext == ".yaml", d.Name() == "Makefile":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllString(string(b), -1) {
			seen[m] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 10 {
		t.Fatalf("found only %d TILECTL_ names: the scan is broken", len(seen))
	}
	var environ []string
	for name := range seen {
		environ = append(environ, name+"=x")
	}
	for _, u := range UnknownEnv(environ) {
		t.Errorf("%s (in %s) is unknown to tilectl: add it to harnessEnv in envcheck.go, or fix its name", u.Name, seen[u.Name])
	}
}
