// Package fdrcmd is `tilectl fdr`: reading the flight data recorder, the
// ring file where give-ups and other notable events are recorded. Its
// `-o json` output (one object per line: seq, kind, key, time, payload) is a
// stable interface; the text form is for people.
package fdrcmd

import (
	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/factory"
)

// NewCmdFDR is the `fdr` command group.
func NewCmdFDR(f *factory.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fdr <command>",
		Short: "Read the flight data recorder",
		Long: "The flight data recorder is a fixed-size ring file (config fdr_path) where\n" +
			"tilectl records notable events, such as tiles given up (kind upload.giveup).",
	}
	cmd.AddCommand(NewCmdTail(f, nil))
	return cmd
}
