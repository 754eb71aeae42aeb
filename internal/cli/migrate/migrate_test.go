package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/migrations"
)

func testDeps(t *testing.T, dbURL string) (Deps, *bytes.Buffer) {
	t.Helper()
	ios, _, out, _ := iostreams.Test()
	cfg := config.Default(func(string) string { return "" })
	cfg.DatabaseURL = dbURL
	return Deps{IO: ios, Config: func() (*config.Config, error) { return cfg, nil }, NewMigrator: OpenMigrator}, out
}

func schemaVersion(t *testing.T, d Deps, out *bytes.Buffer) SchemaVersion {
	t.Helper()
	out.Reset()
	if err := versionRun(context.Background(), &VersionOptions{Deps: d, Output: "json"}); err != nil {
		t.Fatalf("migrate version: %v", err)
	}
	var sv SchemaVersion
	if err := json.Unmarshal(out.Bytes(), &sv); err != nil {
		t.Fatalf("migrate version -o json: %v in %q", err, out)
	}
	return sv
}

func TestUpDownVersionFlow(t *testing.T) {
	ctx := context.Background()
	d, out := testDeps(t, pgtest.NewEmptyDatabase(t))
	latest := uint(migrations.Latest())

	if sv := schemaVersion(t, d, out); sv != (SchemaVersion{Version: 0, Latest: int(latest)}) {
		t.Fatalf("fresh database: %+v", sv)
	}
	steps := []struct {
		name string
		run  func() error
		want uint
		says string
	}{
		{"up", func() error { return upRun(ctx, &UpOptions{Deps: d}) }, latest, "migrated from version 0 to"},
		{"up again", func() error { return upRun(ctx, &UpOptions{Deps: d}) }, latest, "nothing to apply"},
		{"down one step", func() error { return downRun(ctx, &DownOptions{Deps: d, Steps: 1}) }, latest - 1, "rolled back"},
		{"down --all --yes", func() error { return downRun(ctx, &DownOptions{Deps: d, All: true, Yes: true}) }, 0, "to 0"},
		{"up from nothing", func() error { return upRun(ctx, &UpOptions{Deps: d}) }, latest, "migrated"},
	}
	for _, s := range steps {
		out.Reset()
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !strings.Contains(out.String(), s.says) {
			t.Errorf("%s printed %q, want %q", s.name, out, s.says)
		}
		if sv := schemaVersion(t, d, out); sv.Version != s.want || sv.Dirty {
			t.Fatalf("after %s: %+v, want version %d clean", s.name, sv, s.want)
		}
	}
}

func TestDownMoreStepsThanAppliedIsRefused(t *testing.T) {
	d, _ := testDeps(t, pgtest.NewURL(t))
	err := downRun(context.Background(), &DownOptions{Deps: d, Steps: 99})
	if err == nil || !strings.Contains(err.Error(), "cannot roll back 99 steps") {
		t.Fatalf("err = %v", err)
	}
}

func TestDirtySchemaStopsUpAndForceRepairsIt(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	d, out := testDeps(t, dbURL)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// What a migration that failed halfway leaves behind.
	if _, err := conn.Exec(ctx, "UPDATE "+migrations.Table+" SET dirty = true"); err != nil {
		t.Fatal(err)
	}
	latest := migrations.Latest()

	err = upRun(ctx, &UpOptions{Deps: d})
	if err == nil {
		t.Fatal("migrate up on a dirty schema succeeded")
	}
	for _, want := range []string{
		fmt.Sprintf("dirty at version %d", latest),
		fmt.Sprintf("tilectl migrate force %d", latest),
		fmt.Sprintf("tilectl migrate force %d", latest-1),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if sv := schemaVersion(t, d, out); !sv.Dirty || sv.Version != uint(latest) {
		t.Fatalf("version after failed up: %+v", sv)
	}
	out.Reset()
	if err := versionRun(ctx, &VersionOptions{Deps: d, Output: "text"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "DIRTY") {
		t.Errorf("text version does not flag the dirty schema: %q", out)
	}
	if err := forceRun(ctx, &ForceOptions{Deps: d, Version: latest}); err != nil {
		t.Fatalf("force: %v", err)
	}
	if sv := schemaVersion(t, d, out); sv.Dirty || sv.Version != uint(latest) {
		t.Fatalf("after force: %+v", sv)
	}
	if err := upRun(ctx, &UpOptions{Deps: d}); err != nil {
		t.Fatalf("up after force: %v", err)
	}
}

func TestUnreachableDatabaseSaysWhere(t *testing.T) {
	d, _ := testDeps(t, "postgres://postgres:hunter2@127.0.0.1:1/tilectl?sslmode=disable")
	err := upRun(context.Background(), &UpOptions{Deps: d})
	if err == nil || !strings.Contains(err.Error(), "cannot reach Postgres at 127.0.0.1:1") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("password in error: %v", err)
	}
}
