package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/migrations"
)

// VersionOptions are `migrate version`'s inputs.
type VersionOptions struct {
	Deps
	Output string // text or json
}

// SchemaVersion is `migrate version -o json`'s output (stable; see README).
type SchemaVersion struct {
	Version uint `json:"version"` // 0 when no migration is applied
	Dirty   bool `json:"dirty"`   // a migration failed halfway
	Latest  int  `json:"latest"`  // the highest version in this build
}

// NewCmdVersion is `migrate version`.
func NewCmdVersion(d Deps, runF func(context.Context, *VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{Deps: d}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the applied schema version and whether it is dirty",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Output != "text" && opts.Output != "json" {
				return exitcode.UsageError(fmt.Errorf("-o must be text or json, got %q", opts.Output))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return versionRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "text", "output format: text or json")
	return cmd
}

func versionRun(ctx context.Context, opts *VersionOptions) error {
	return opts.withMigrator(ctx, func(m Migrator) error {
		v, dirty, err := m.Version()
		if err != nil {
			return err
		}
		sv := SchemaVersion{Version: v, Dirty: dirty, Latest: migrations.Latest()}
		if opts.Output == "json" {
			enc := json.NewEncoder(opts.IO.Out)
			enc.SetIndent("", "  ")
			return enc.Encode(sv)
		}
		fmt.Fprintf(opts.IO.Out, "schema version %d (this build's latest: %d)\n", sv.Version, sv.Latest)
		switch {
		case dirty:
			fmt.Fprintf(opts.IO.Out, "DIRTY: %v\n", &migrations.DirtyError{Version: v})
		case int(v) < sv.Latest:
			fmt.Fprintln(opts.IO.Out, "pending migrations: run 'tilectl migrate up'")
		case int(v) > sv.Latest:
			fmt.Fprintln(opts.IO.Out, "the database is newer than this build: upgrade tilectl")
		}
		return nil
	})
}

// ForceOptions are `migrate force`'s inputs.
type ForceOptions struct {
	Deps
	Version int
}

// NewCmdForce is `migrate force V`.
func NewCmdForce(d Deps, runF func(context.Context, *ForceOptions) error) *cobra.Command {
	opts := &ForceOptions{Deps: d}
	cmd := &cobra.Command{
		Use:   "force V",
		Short: "Record version V as applied and clear the dirty flag, running nothing",
		Long: "The recovery step after a migration failed halfway: repair the schema by hand,\n" +
			"then record the version whose changes are all in place. Use 'force -- -1' for\n" +
			"\"no version\".",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := strconv.Atoi(args[0])
			if err != nil || v < -1 {
				return exitcode.UsageError(fmt.Errorf("V must be a version number (or -1), got %q", args[0]))
			}
			opts.Version = v
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return forceRun(cmd.Context(), opts)
		},
	}
	iostreams.AddOutputFlag(cmd, &opts.Output)
	return cmd
}

func forceRun(ctx context.Context, opts *ForceOptions) error {
	return opts.withMigrator(ctx, func(m Migrator) error {
		before, _, err := m.Version()
		if err != nil {
			return err
		}
		if err := m.Force(opts.Version); err != nil {
			return err
		}
		return opts.report(Result{Action: "force", From: int64(before), To: int64(opts.Version), Changed: int64(before) != int64(opts.Version)},
			"schema version recorded as %d (clean); nothing was run\n", opts.Version)
	})
}
