package migrate

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/iostreams"
)

// UpOptions are `migrate up`'s inputs.
type UpOptions struct {
	Deps
}

// NewCmdUp is `migrate up`.
func NewCmdUp(d Deps, runF func(context.Context, *UpOptions) error) *cobra.Command {
	opts := &UpOptions{Deps: d}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Apply every migration not yet applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return upRun(cmd.Context(), opts)
		},
	}
	iostreams.AddOutputFlag(cmd, &opts.Output)
	return cmd
}

func upRun(ctx context.Context, opts *UpOptions) error {
	return opts.withMigrator(ctx, func(m Migrator) error {
		before, _, err := m.Version()
		if err != nil {
			return err
		}
		if err := m.Up(); err != nil {
			return err
		}
		after, _, err := m.Version()
		if err != nil {
			return err
		}
		if after == before {
			return opts.report(Result{Action: "up", From: int64(before), To: int64(after)},
				"schema already at version %d: nothing to apply\n", after)
		}
		return opts.report(Result{Action: "up", From: int64(before), To: int64(after), Changed: true},
			"schema migrated from version %d to %d\n", before, after)
	})
}

// DownOptions are `migrate down`'s inputs.
type DownOptions struct {
	Deps
	Steps int  // migrations to roll back, at least 1
	All   bool // roll back every migration
	// Yes confirms --all without asking; StdinTTY says a person can be
	// asked instead.
	Yes      bool
	StdinTTY bool
}

// NewCmdDown is `migrate down [N] | --all`.
func NewCmdDown(d Deps, runF func(context.Context, *DownOptions) error) *cobra.Command {
	opts := &DownOptions{Deps: d}
	cmd := &cobra.Command{
		Use:   "down [N]",
		Short: "Roll back the last migration, the last N, or --all",
		Long: "Roll back migrations. With no argument, one step; with N, N steps; with --all,\n" +
			"every migration (this drops all tilectl tables and their data).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Steps = 1
			if len(args) == 1 {
				if opts.All {
					return exitcode.UsageError(errors.New("give N or --all, not both"))
				}
				n, err := strconv.Atoi(args[0])
				if err != nil || n < 1 {
					return exitcode.UsageError(fmt.Errorf("N must be a positive number of steps, got %q", args[0]))
				}
				opts.Steps = n
			}
			opts.StdinTTY = d.IO.IsStdinTTY()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return downRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "roll back every migration (drops all tilectl data; asks on a terminal, needs --yes otherwise)")
	cmd.Flags().BoolVar(&opts.Yes, "yes", false, "confirm --all without asking")
	iostreams.AddOutputFlag(cmd, &opts.Output)
	return cmd
}

func downRun(ctx context.Context, opts *DownOptions) error {
	return opts.withMigrator(ctx, func(m Migrator) error {
		before, _, err := m.Version()
		if err != nil {
			return err
		}
		n := opts.Steps
		if opts.All && before > 0 && !opts.Yes {
			if err := opts.confirmAll(ctx); err != nil {
				return err
			}
		}
		if opts.All {
			n = 0 // Migrator.Down: 0 means all
		} else if uint(n) > before {
			return fmt.Errorf("cannot roll back %s: the schema is at version %d", iostreams.Count(n, "step", "steps"), before)
		}
		if err := m.Down(n); err != nil {
			return err
		}
		after, _, err := m.Version()
		if err != nil {
			return err
		}
		if after == before {
			return opts.report(Result{Action: "down", From: int64(before), To: int64(after)},
				"schema already at version %d: nothing to roll back\n", after)
		}
		return opts.report(Result{Action: "down", From: int64(before), To: int64(after), Changed: true},
			"schema rolled back from version %d to %d\n", before, after)
	})
}

// confirmAll says what --all would destroy and asks for "destroy" on a
// terminal; off one it refuses (the caller passes --yes to mean it).
func (opts *DownOptions) confirmAll(ctx context.Context) error {
	what := "every tilectl table and its data"
	if cfg, err := opts.Config(); err == nil {
		if conn, err := pgx.Connect(ctx, cfg.DatabaseURL); err == nil {
			var flights, tiles int64
			if conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM flights),
				(SELECT count(*) FROM tiles WHERE voting_status <> 'uploaded')`).Scan(&flights, &tiles) == nil {
				what = fmt.Sprintf("%s and %s not yet uploaded, with every other tilectl table",
					iostreams.Count(flights, "flight", "flights"), iostreams.Count(tiles, "tile", "tiles"))
			}
			conn.Close(ctx)
		}
	}
	if !opts.StdinTTY {
		return exitcode.UsageError(fmt.Errorf("migrate down --all would destroy %s; pass --yes to confirm (no terminal to ask on)", what))
	}
	if !opts.IO.Confirm(fmt.Sprintf("migrate down --all destroys %s. Type destroy to go on: ", what), "destroy") {
		return exitcode.New(exitcode.Failure, errors.New("not confirmed; nothing was rolled back"))
	}
	return nil
}
