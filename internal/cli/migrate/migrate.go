// Package migrate is `tilectl migrate`: apply, roll back, inspect and force
// the database schema (migrations/). It never changes the schema without
// being asked, and a dirty schema stops every step except force, with the
// repair steps in the error.
package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/migrations"
	"github.com/tilectl/tilectl/tilestore"
)

// Migrator is what the migrate commands need from migrations.Migrator.
type Migrator interface {
	Up() error
	Down(n int) error
	Version() (version uint, dirty bool, err error)
	Force(version int) error
	Close() error
}

var _ Migrator = (*migrations.Migrator)(nil)

// Deps are the dependencies every migrate subcommand shares.
type Deps struct {
	IO     *iostreams.IOStreams
	Config func() (*config.Config, error)
	// NewMigrator opens a migrator on a database URL.
	NewMigrator func(ctx context.Context, databaseURL string) (Migrator, error)
	// Output is -o: text or json.
	Output string
}

func depsFrom(f *factory.Factory) Deps {
	return Deps{IO: f.IOStreams, Config: f.Config, NewMigrator: OpenMigrator}
}

// OpenMigrator opens the embedded migrations on databaseURL. It pings the
// database through tilestore.Open first, whose errors say plainly what is
// wrong (unreachable, bad credentials, no such database) and never show the
// password; golang-migrate's own connection errors are far noisier.
func OpenMigrator(ctx context.Context, databaseURL string) (Migrator, error) {
	s, err := tilestore.Open(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	s.Close()
	m, err := migrations.New(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w (database %s)", err, config.RedactURL(databaseURL))
	}
	return m, nil
}

// open loads the configuration and opens a migrator; the caller closes it.
func (d Deps) open(ctx context.Context) (Migrator, error) {
	c, err := d.Config()
	if err != nil {
		return nil, err
	}
	m, err := d.NewMigrator(ctx, c.DatabaseURL)
	var ce *tilestore.ConnectError
	if errors.As(err, &ce) {
		ce.URLFrom = c.Origin("database_url")
	}
	return m, err
}

// withMigrator runs fn on an open migrator and reports a close error only
// when fn succeeded.
func (d Deps) withMigrator(ctx context.Context, fn func(m Migrator) error) (err error) {
	m, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := m.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close migrator: %w", cerr)
		}
	}()
	return fn(m)
}

// NewCmdMigrate is the `migrate` group.
func NewCmdMigrate(f *factory.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate <command>",
		Short: "Apply, roll back or inspect the database schema",
		Long: fmt.Sprintf("Manage the tilectl schema (version table %s). This build's latest version is %d.",
			migrations.Table, migrations.Latest()),
	}
	deps := depsFrom(f)
	cmd.AddCommand(NewCmdUp(deps, nil), NewCmdDown(deps, nil), NewCmdVersion(deps, nil), NewCmdForce(deps, nil))
	return cmd
}
