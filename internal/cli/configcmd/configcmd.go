// Package configcmd is `tilectl config`: the effective configuration, each
// value with where it came from (default, file, env, flag). The provider
// token is always shown redacted, never its value.
package configcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
)

// Options are `config view`'s inputs.
type Options struct {
	IO        *iostreams.IOStreams
	Config    func() (*config.Config, error)
	LookupEnv config.LookupEnv

	Output string // text or json
}

// View is `config view -o json`'s output (stable; see README).
//
//	file             the config file read, or null
//	searched         where discovery looks when --config and
//	                 TILECTL_CONFIG are not set, in order
//	values           one object per key: key, value (string form; the
//	                 token is "[redacted]" when set, "" when not), env
//	                 (its variable) and source {kind, name, line, file}
type View struct {
	File     *string  `json:"file"`
	Searched []string `json:"searched"`
	Values   []Value  `json:"values"`
}

// Value is one configuration key.
type Value struct {
	Key    string        `json:"key"`
	Value  string        `json:"value"`
	Env    string        `json:"env"`
	Source config.Source `json:"source"`
}

// NewCmdConfig is the `config` group.
func NewCmdConfig(f *factory.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config <command>",
		Short: "Show the effective configuration",
		Long: "Configuration comes from defaults < a config file < TILECTL_* environment < flags.\n" +
			"The config file is --config, else $TILECTL_CONFIG, else the first that exists of\n" +
			"$XDG_CONFIG_HOME/tilectl/config.yaml (~/.config/tilectl/config.yaml when\n" +
			"XDG_CONFIG_HOME is unset) and /etc/tilectl/config.yaml.",
		Example: "  tilectl config view\n  tilectl --config ./field.yaml config view -o json",
	}
	cmd.AddCommand(NewCmdView(f, nil))
	return cmd
}

// NewCmdView is `config view [-o text|json]`.
func NewCmdView(f *factory.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Config: f.Config, LookupEnv: f.LookupEnv}
	cmd := &cobra.Command{
		Use:   "view",
		Short: "Print every configuration value and where it came from (the token redacted)",
		Example: "  tilectl config view\n" +
			"  TILECTL_UPLOAD_CONCURRENCY=8 tilectl config view -o json | jq '.values[] | select(.key==\"upload.concurrency\")'",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := iostreams.CheckOutput(opts.Output); err != nil {
				return exitcode.UsageError(err)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	iostreams.AddOutputFlag(cmd, &opts.Output)
	return cmd
}

// Run prints the configuration.
func Run(_ context.Context, opts *Options) error {
	c, err := opts.Config()
	if err != nil {
		return err
	}
	v := View{Searched: config.DiscoveryPaths(opts.LookupEnv), Values: []Value{}}
	if c.File() != "" {
		file := c.File()
		v.File = &file
	}
	for _, fl := range c.Fields() {
		v.Values = append(v.Values, Value{Key: fl.Key, Value: fl.Value(), Env: fl.Env, Source: c.Source(fl.Key)})
	}
	if iostreams.IsJSON(opts.Output) {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	file := "none"
	if v.File != nil {
		file = *v.File
	}
	fmt.Fprintf(opts.IO.Out, "config file: %s\n\n", file)
	tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, val := range v.Values {
		shown := val.Value
		if shown == "" {
			shown = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", val.Key, shown, val.Source)
	}
	return tw.Flush()
}
