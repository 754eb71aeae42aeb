package scripts_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// make test drops the migrated template databases internal/pgtest keeps,
// so it leaves no database behind on a server it did not start. The test
// names its own pattern: other packages' templates are in use meanwhile.
func TestMakeTestDropsTheTemplateDatabasesItLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatalf("reach Postgres: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "tilectl_tmplcheck_" + hex.EncodeToString(b)
	names := []string{prefix + "_a", prefix + "_b"}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{n}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	keep := prefix + "x_keep" // does not match the pattern below
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{keep}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// Deferred, not t.Cleanup: it must run before conn is closed.
	defer func() {
		for _, n := range append(names, keep) {
			if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)"); err != nil {
				t.Errorf("drop %s: %v", n, err)
			}
		}
	}()

	root := repoRoot(t)
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "pg.sh"), "drop-templates", pgtest.AdminURL())
	cmd.Env = append(os.Environ(), `PG_TEMPLATE_PATTERN=`+prefix+`\_%`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg.sh drop-templates: %v\n%s", err, out)
	}
	for _, n := range names {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", n).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("database %s is still there after drop-templates", n)
		}
	}
	var kept bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", keep).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if !kept {
		t.Errorf("database %s, which the pattern does not match, was dropped", keep)
	}
}
