package iostreams

import (
	"fmt"

	"github.com/spf13/cobra"
)

// Output formats every command accepts with -o. "table" is an alias of
// "text", so scripts that ask status for -o table keep working.
const (
	OutputText  = "text"
	OutputJSON  = "json"
	outputTable = "table"
)

// AddOutputFlag adds the one -o/--output flag every command shares, with
// shell completion of its values.
func AddOutputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", OutputText, "output format: text or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{OutputText + "\tfor people", OutputJSON + "\tstable, for scripts"}, cobra.ShellCompDirectiveNoFileComp))
}

// CheckOutput validates an -o value.
func CheckOutput(v string) error {
	switch v {
	case OutputText, OutputJSON, outputTable:
		return nil
	}
	return fmt.Errorf("-o/--output must be text or json, got %q", v)
}

// IsJSON reports whether -o asks for JSON.
func IsJSON(v string) bool { return v == OutputJSON }
