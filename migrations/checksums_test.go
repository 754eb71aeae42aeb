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
		got := statementsSum(b)
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

// statementsSum is the sha256 of a migration's statements: the file without
// its comment lines ("--" after optional blanks) and blank lines, each line
// without trailing blanks. What a migration does to a database can never
// change once released; what its comments say can be corrected.
func statementsSum(b []byte) string {
	h := sha256.New()
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, " \t\r")
		if t := strings.TrimLeft(line, " \t"); t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		h.Write([]byte(line))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Comments do not count, statements do: a changed comment keeps the sum,
// a changed statement does not.
func TestStatementsSumIgnoresCommentsOnly(t *testing.T) {
	base := statementsSum([]byte("-- why\nALTER TABLE t ADD COLUMN c int;\n"))
	if got := statementsSum([]byte("-- why, said better\n\n  -- and more\nALTER TABLE t ADD COLUMN c int;  \n")); got != base {
		t.Error("a comment-only change altered the sum")
	}
	if got := statementsSum([]byte("-- why\nALTER TABLE t ADD COLUMN c bigint;\n")); got == base {
		t.Error("a changed statement kept the sum")
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
