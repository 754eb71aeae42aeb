// Package root assembles the tilectl command tree: global flags, the list
// of commands, and the rule that anything wrong before a command starts
// running (unknown command or flag, wrong arguments) is a usage error.
package root

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/cli/version"
)

// globalFlags maps each persistent flag to the config key it overrides.
var globalFlags = []struct{ name, key, usage string }{
	{"log-level", "log_level", "log level: trace, debug, info, warn, error (env TILECTL_LOG_LEVEL)"},
	{"database-url", "database_url", "PostgreSQL URL (env TILECTL_DATABASE_URL)"},
	{"cache-dir", "cache_dir", "tile blob cache directory (env TILECTL_CACHE_DIR)"},
	{"provider-url", "provider_url", "satellite provider base URL (env TILECTL_PROVIDER_URL)"},
	{"provider-ca-file", "provider_ca_file", "PEM bundle of CA certificates trusted for the provider, besides the system roots (env TILECTL_PROVIDER_CA_FILE)"},
	{"provider-client-cert", "provider_client_cert", "PEM client certificate for a provider that asks for one (env TILECTL_PROVIDER_CLIENT_CERT)"},
	{"provider-client-key", "provider_client_key", "PEM private key of --provider-client-cert (env TILECTL_PROVIDER_CLIENT_KEY)"},
}

// New builds the root command on f.
func New(f *factory.Factory) *cobra.Command {
	cobra.EnableTraverseRunHooks = true
	cmd := &cobra.Command{
		Use:   "tilectl <command>",
		Short: "Upload a drone flight's map tiles to a satellite provider, exactly once",
		Long: "tilectl imports a flight's map tiles into a local cache and uploads them to a\n" +
			"satellite provider over an unreliable link, so that each tile arrives exactly once.\n\n" +
			"Configuration: defaults < config file < TILECTL_* environment < flags. The config file is\n" +
			"--config, else $TILECTL_CONFIG, else the first found of $XDG_CONFIG_HOME/tilectl/config.yaml\n" +
			"(~/.config/tilectl/config.yaml), /etc/tilectl/config.yaml. See 'tilectl config view'.\n\n" +
			"Exit codes: 0 success; 1 failure; 2 usage or configuration; 3 upload-pending left tiles\n" +
			"pending or given up; 4 flight not on_ground; 130 SIGINT;\n" +
			"143 SIGTERM (in-flight batches are settled first; a second signal exits at once).",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version.String(f.Version, f.Commit),
		// Runs before every command (EnableTraverseRunHooks, set below, keeps
		// it running even when a subcommand adds its own hook).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			bindGlobalFlags(f, cmd)
			// A flag that sets a config field is checked now, on every
			// command: also one that never loads the configuration
			// (version, fdr tail --file) or loads it only after work has
			// started (tiles import reads the directory first).
			if setsConfig(cmd.Flags()) {
				if _, err := f.Config(); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.SetOut(f.IOStreams.Out)
	cmd.SetErr(f.IOStreams.ErrOut)
	cmd.SetIn(f.IOStreams.In)
	cmd.SetVersionTemplate("tilectl {{.Version}}\n")

	pf := cmd.PersistentFlags()
	pf.String("config", "", "YAML config file (env TILECTL_CONFIG; else ~/.config/tilectl/config.yaml, /etc/tilectl/config.yaml)")
	for _, g := range globalFlags {
		pf.String(g.name, "", g.usage)
		_ = pf.SetAnnotation(g.name, factory.ConfigKeyAnnotation, []string{g.key})
	}
	pf.String("provider-token-file", "", "read the provider token from this file (env TILECTL_PROVIDER_TOKEN holds the token itself)")

	for _, newCmd := range Commands {
		cmd.AddCommand(newCmd(f))
	}
	completionCommand(cmd)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return exitcode.UsageError(fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
	})
	usageErrors(cmd)
	applyConventions(f, cmd)
	return cmd
}

// usageErrors makes every error cobra returns before a command starts
// running (unknown command, wrong number of arguments) a usage error. A
// group command (migrate, tiles) becomes runnable so that cobra validates
// its arguments: bare, it prints its help; with an unknown subcommand it
// fails with exit 2 instead of printing help and exiting 0.
func usageErrors(cmd *cobra.Command) {
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	inner := cmd.Args
	cmd.Args = func(c *cobra.Command, args []string) error {
		var err error
		if inner != nil {
			err = inner(c, args)
		} else if c.HasSubCommands() && len(args) > 0 {
			err = fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath())
		}
		if err != nil {
			return exitcode.UsageError(fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
		}
		return nil
	}
	for _, sub := range cmd.Commands() {
		usageErrors(sub)
	}
}

// bindGlobalFlags hands --config and the flags the user set to the factory,
// which applies them when the configuration is first loaded.
func bindGlobalFlags(f *factory.Factory, cmd *cobra.Command) {
	flags := cmd.Flags()
	if p, err := flags.GetString("config"); err == nil {
		f.ConfigPath = p
	}
	f.ApplyFlags = func(c *config.Config) error {
		var errs []error
		// Every flag that sets a config field, global or the command's
		// own (factory.ConfigKeyAnnotation).
		if err := factory.ApplyConfigFlags(c, flags); err != nil {
			errs = append(errs, err)
		}
		if fl := flags.Lookup("provider-token-file"); fl != nil && fl.Changed {
			path := fl.Value.String()
			tok, err := readTokenFile(f.IOStreams.ErrOut, path)
			if err != nil {
				errs = append(errs, err)
			} else {
				c.SetToken(config.Source{Kind: config.SourceFlag, Name: "--provider-token-file", File: path}, tok)
			}
		}
		return errors.Join(errs...)
	}
}

// setsConfig reports whether the user set a flag that sets a config field:
// --provider-token-file, or one annotated with factory.ConfigKeyAnnotation
// (the global ones are too).
func setsConfig(flags *pflag.FlagSet) bool {
	set := false
	flags.Visit(func(fl *pflag.Flag) {
		if fl.Name == "provider-token-file" || len(fl.Annotations[factory.ConfigKeyAnnotation]) == 1 {
			set = true
		}
	})
	return set
}

// readTokenFile reads a token, dropping the trailing newline editors add,
// and warns on warnOut when the file is readable by its group or others (a
// secret should be 0600, as ssh insists for keys). Its errors name the file,
// never its contents.
func readTokenFile(warnOut io.Writer, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--provider-token-file: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(warnOut, "tilectl: warning: provider token file %s is readable by group or others (mode %04o); run: chmod 600 %s\n",
			path, fi.Mode().Perm(), path)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// Execute runs the command line args (os.Args[1:] when nil) and returns the
// error to report; exitcode.Code maps it to the exit status.
func Execute(ctx context.Context, f *factory.Factory, args []string) error {
	cmd := New(f)
	if args != nil {
		cmd.SetArgs(args)
	}
	return cmd.ExecuteContext(ctx)
}
