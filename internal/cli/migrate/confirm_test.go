package migrate

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/migrations"
)

func TestDownAllSaysWhatItWouldDestroyAndNeedsYesOffATerminal(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO flights (flight_id, state) VALUES ('F1', 'on_ground'), ('F2', 'on_ground');
INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at)
VALUES ('t1', 'F1', 2, 0, 0, 'image/png', 1, repeat('a', 64), 'F1/2/0/0.png', now())`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d, out := testDeps(t, dbURL)
	err = downRun(ctx, &DownOptions{Deps: d, All: true})
	if exitcode.Code(err) != exitcode.Usage || !strings.Contains(err.Error(), "2 flights and 1 tile not yet uploaded") ||
		!strings.Contains(err.Error(), "--yes") {
		t.Fatalf("down --all without --yes: %v (exit %d); want exit 2 naming 2 flights, 1 tile and --yes", err, exitcode.Code(err))
	}
	d.IO.In = strings.NewReader("no\n")
	if err := downRun(ctx, &DownOptions{Deps: d, All: true, StdinTTY: true}); exitcode.Code(err) != exitcode.Failure {
		t.Fatalf("down --all answered no: %v, want exit 1", err)
	}
	if sv := schemaVersion(t, d, out); int(sv.Version) != migrations.Latest() {
		t.Fatalf("schema at %d after refused down --all, want %d", sv.Version, migrations.Latest())
	}
}
