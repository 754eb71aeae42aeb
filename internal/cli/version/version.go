// Package version is `tilectl version`: which build this is.
package version

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
)

// Options are `version`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Version string
	Commit  string
	Output  string // text or json
}

// Info is `version -o json`'s output (stable; see README).
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"` // "" when the build did not record it
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// NewCmdVersion is `version`.
func NewCmdVersion(f *factory.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Version: f.Version, Commit: f.Commit}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print tilectl's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Output != "text" && opts.Output != "json" {
				return exitcode.UsageError(fmt.Errorf("-o must be text or json, got %q", opts.Output))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "text", "output format: text or json")
	return cmd
}

// Run prints the build information.
func Run(_ context.Context, opts *Options) error {
	info := Info{
		Version:   opts.Version,
		Commit:    opts.Commit,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	info.Version, info.Commit = Normalize(info.Version, info.Commit)
	if opts.Output == "json" {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	commit := info.Commit
	if commit == "" {
		commit = "unknown"
	}
	fmt.Fprintf(opts.IO.Out, "tilectl %s (commit %s, %s, %s)\n", info.Version, commit, info.GoVersion, info.Platform)
	return nil
}

// semver is a semantic version, with an optional v and pre-release or
// build part (git describe's "v1.2.3-4-gabc1234" included).
var semver = regexp.MustCompile(`^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]+)?$`)

// Normalize returns the build's semantic version, or "dev" when the build
// did not record one, and its commit. A version that is not semantic (git
// describe without a tag gives the bare commit) becomes "dev", and becomes
// the commit when none was recorded.
func Normalize(v, commit string) (string, string) {
	if commit == "" {
		commit = vcsRevision()
	}
	if !semver.MatchString(v) {
		if commit == "" && v != "" && v != "dev" {
			commit = v
		}
		v = "dev"
	}
	return v, commit
}

// String is the version as --version prints it: "1.2.3 (commit abc1234)".
func String(v, commit string) string {
	v, commit = Normalize(v, commit)
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s (commit %s)", v, commit)
}

// vcsRevision is the commit the go tool recorded, when it recorded one
// (not with -buildvcs=false; the Makefile passes it with -ldflags instead).
func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}
