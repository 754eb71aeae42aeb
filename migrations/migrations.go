// Package migrations holds tilectl's schema as numbered, append-only
// golang-migrate files, embedded in the binary, and runs them through the
// pgx/v5 driver.
//
// Released files never change: checksums.txt records each file's SHA-256 and
// a test fails when one differs. A schema change is a new NNNN_name pair.
package migrations

import (
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed *.sql
var FS embed.FS

// Table is the table golang-migrate keeps the schema version in.
const Table = "tilectl_schema_migrations"

// ErrNoChange is returned by Up and Down when there was nothing to apply.
var ErrNoChange = migrate.ErrNoChange

// DirtyError says a migration failed halfway and what to do about it.
type DirtyError struct{ Version uint }

func (e *DirtyError) Error() string {
	return fmt.Sprintf("database schema is dirty at version %d: a migration failed halfway; "+
		"inspect the schema, repair it by hand, then run 'tilectl migrate force %d' "+
		"(if the migration's changes are all in place) or 'tilectl migrate force %d' "+
		"(if none are) and run 'tilectl migrate up' again", e.Version, e.Version, int(e.Version)-1)
}

// Migrator applies the embedded migrations to one database.
type Migrator struct {
	m *migrate.Migrate
}

// New opens a migrator for a postgres:// (or postgresql://) URL.
func New(databaseURL string) (*Migrator, error) {
	src, err := iofs.New(FS, ".")
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	driverURL, err := driverURL(databaseURL)
	if err != nil {
		return nil, err
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, driverURL)
	if err != nil {
		return nil, fmt.Errorf("connect to database for migrations: %w", redact(err, databaseURL))
	}
	return &Migrator{m: m}, nil
}

// driverURL turns a libpq-style URL into golang-migrate's pgx5:// form and
// names the version table.
func driverURL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("database URL must look like postgres://user@host:port/dbname, got scheme %q", schemeOf(databaseURL))
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", Table)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func schemeOf(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		return s[:i]
	}
	return ""
}

// redact keeps a password in the URL out of an error message.
func redact(err error, databaseURL string) error {
	u, perr := url.Parse(databaseURL)
	if perr != nil || u.User == nil {
		return err
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}

// Up applies every migration not yet applied. It returns nil when the schema
// is already current.
func (mg *Migrator) Up() error {
	if err := mg.checkClean(); err != nil {
		return err
	}
	if err := mg.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", mg.dirtyOr(err))
	}
	return nil
}

// Down rolls back n migrations, or all of them when n is 0.
func (mg *Migrator) Down(n int) error {
	if n < 0 {
		return fmt.Errorf("migrate down: step count must be 0 (all) or positive, got %d", n)
	}
	if err := mg.checkClean(); err != nil {
		return err
	}
	var err error
	if n == 0 {
		err = mg.m.Down()
	} else {
		err = mg.m.Steps(-n)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate down: %w", mg.dirtyOr(err))
	}
	return nil
}

// Version reports the applied version (0 when none) and whether it is dirty.
func (mg *Migrator) Version() (version uint, dirty bool, err error) {
	v, d, err := mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	return v, d, nil
}

// Force sets the recorded version without running anything and clears the
// dirty flag: the recovery step after a failed migration was repaired by
// hand. -1 means no version.
func (mg *Migrator) Force(version int) error {
	if version < -1 {
		return fmt.Errorf("migrate force: version must be -1 or more, got %d", version)
	}
	if version > 0 {
		if !hasVersion(version) {
			return fmt.Errorf("migrate force: no migration %04d in this build (latest is %04d)", version, Latest())
		}
	}
	if err := mg.m.Force(version); err != nil {
		return fmt.Errorf("migrate force %d: %w", version, err)
	}
	return nil
}

// Close releases the migrator's database connection.
func (mg *Migrator) Close() error {
	srcErr, dbErr := mg.m.Close()
	return errors.Join(srcErr, dbErr)
}

func (mg *Migrator) checkClean() error {
	_, dirty, err := mg.Version()
	if err != nil {
		return err
	}
	if dirty {
		v, _, _ := mg.m.Version()
		return &DirtyError{Version: v}
	}
	return nil
}

func (mg *Migrator) dirtyOr(err error) error {
	var de migrate.ErrDirty
	if errors.As(err, &de) {
		return &DirtyError{Version: uint(de.Version)}
	}
	if v, dirty, verr := mg.m.Version(); verr == nil && dirty {
		return fmt.Errorf("%w (%v)", &DirtyError{Version: v}, err)
	}
	return err
}

// Latest is the highest migration version in this build.
func Latest() int {
	entries, _ := FS.ReadDir(".")
	latest := 0
	for _, e := range entries {
		var v int
		if _, err := fmt.Sscanf(e.Name(), "%04d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

func hasVersion(version int) bool {
	entries, _ := FS.ReadDir(".")
	prefix := fmt.Sprintf("%04d_", version)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			return true
		}
	}
	return false
}
