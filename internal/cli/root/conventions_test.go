package root

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
)

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

func userCommands(t *testing.T) []*cobra.Command {
	t.Helper()
	ios, _, _, _ := iostreams.Test()
	root := New(factory.NewWith(ios, func(string) (string, bool) { return "", false }, "test", "abc"))
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var out []*cobra.Command
	walk(root, func(c *cobra.Command) {
		if p := c.CommandPath(); strings.HasPrefix(p, "tilectl help") || strings.HasPrefix(p, "tilectl completion") {
			return // cobra's own
		}
		out = append(out, c)
	})
	return out
}

func TestEveryCommandHasExamples(t *testing.T) {
	for _, c := range userCommands(t) {
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no Examples: add it to the examples table in conventions.go", c.CommandPath())
		}
	}
}

func TestEveryOutputFlagTakesTextAndJSONAndTableIsText(t *testing.T) {
	for _, c := range userCommands(t) {
		fl := c.Flags().Lookup("output")
		if fl == nil {
			continue
		}
		if fl.Shorthand != "o" || fl.DefValue != "text" {
			t.Errorf("%s: -o/--output default %q shorthand %q, want text and -o", c.CommandPath(), fl.DefValue, fl.Shorthand)
		}
		if !strings.Contains(fl.Usage, "text or json") {
			t.Errorf("%s: --output usage %q does not say text or json", c.CommandPath(), fl.Usage)
		}
		fn, ok := c.GetFlagCompletionFunc("output")
		if !ok {
			t.Errorf("%s: no completion for -o", c.CommandPath())
			continue
		}
		got, _ := fn(c, nil, "")
		if len(got) != 2 || !strings.HasPrefix(got[0], "text") || !strings.HasPrefix(got[1], "json") {
			t.Errorf("%s: -o completes to %v", c.CommandPath(), got)
		}
	}
	if r := execute(t, nil, "status", "-o", "table", "--database-url", "postgres://127.0.0.1:1/x"); r.code == 2 {
		t.Errorf("status -o table is refused: %s", r.errOut)
	}
}

func TestCommandsThatPrintDataTakeOutputJSON(t *testing.T) {
	want := []string{"tilectl upload-pending", "tilectl status", "tilectl migrate up", "tilectl migrate down",
		"tilectl migrate force", "tilectl migrate version", "tilectl tiles import", "tilectl fdr tail",
		"tilectl version", "tilectl config view"}
	have := map[string]bool{}
	for _, c := range userCommands(t) {
		have[c.CommandPath()] = c.Flags().Lookup("output") != nil
	}
	for _, p := range want {
		if !have[p] {
			t.Errorf("%s has no -o json", p)
		}
	}
}
