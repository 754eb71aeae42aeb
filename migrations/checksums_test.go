package migrations_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/migrations"
)

const appendOnly = "released migrations are append-only: do not edit, rename or delete one; " +
	"add a new NNNN_name.up.sql/.down.sql pair with the next number instead"

func readChecksums(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("checksums.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 || len(fields[0]) != 64 {
			t.Fatalf("checksums.txt:%d: want \"<sha256>  <file>\", got %q", line, text)
		}
		if _, dup := sums[fields[1]]; dup {
			t.Fatalf("checksums.txt:%d: %s is listed twice", line, fields[1])
		}
		sums[fields[1]] = fields[0]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}

func TestChecksumsMatchEveryEmbeddedMigration(t *testing.T) {
	t.Parallel()
	sums := readChecksums(t)
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded migrations (%v)", err)
	}
	for _, name := range names {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		got := hex.EncodeToString(h[:])
		want, listed := sums[name]
		switch {
		case !listed:
			t.Errorf("%s is not in checksums.txt: if it is a new migration, add the line\n%s  %s", name, got, name)
		case want != got:
			t.Errorf("%s changed since it was released (sha256 %s, recorded %s): %s", name, got, want, appendOnly)
		}
		delete(sums, name)
	}
	for name := range sums {
		t.Errorf("checksums.txt lists %s but no such migration is embedded: %s", name, appendOnly)
	}
}

var migrationName = regexp.MustCompile(`^(\d{4})_[a-z0-9_]+\.(up|down)\.sql$`)

func TestMigrationsAreNumberedPairsWithoutGaps(t *testing.T) {
	t.Parallel()
	names, _ := fs.Glob(migrations.FS, "*.sql")
	pairs := map[string]map[string]bool{}
	for _, name := range names {
		m := migrationName.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("%s is not named NNNN_name.up.sql or NNNN_name.down.sql", name)
			continue
		}
		if pairs[m[1]] == nil {
			pairs[m[1]] = map[string]bool{}
		}
		pairs[m[1]][m[2]] = true
	}
	for v := 1; v <= migrations.Latest(); v++ {
		key := fmt.Sprintf("%04d", v)
		if !pairs[key]["up"] || !pairs[key]["down"] {
			t.Errorf("migration %s lacks its up or down file (have %v)", key, pairs[key])
		}
	}
	if len(pairs) != migrations.Latest() {
		t.Errorf("%d versions for latest %d: numbers must be 0001..N without gaps", len(pairs), migrations.Latest())
	}
}
