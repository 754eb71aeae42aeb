package iostreams

import (
	"encoding/json"
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

// Report ends a command that reports one object: with -o json it prints
// rep (which the caller has filled, its error included) as the one JSON
// object of every exit, otherwise it runs text when the command succeeded.
// It returns err, or the error of printing rep when err is nil.
func (s *IOStreams) Report(output string, rep any, err error, text func()) error {
	if IsJSON(output) {
		if jerr := json.NewEncoder(s.Out).Encode(rep); jerr != nil && err == nil {
			err = jerr
		}
		return err
	}
	if err == nil {
		text()
	}
	return err
}
