package root

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/iostreams"
)

// shellWords splits one example line as a shell would for these simple
// lines: words, '…' and "…" quoting, a comment from an unquoted #, and
// nothing after a pipe (what follows is another program).
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case (r == '#' || r == '|') && !inWord:
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unclosed quote in example %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// Every command line in every command's Examples is one the command
// accepts: cobra parses its flags and arguments, and the checks a command
// makes before doing anything (required flags, flag groups, PreRunE) pass.
func TestEveryHelpExampleParsesAndPassesTheCommandsChecks(t *testing.T) {
	n := 0
	for _, c := range userCommands(t) {
		for _, line := range strings.Split(c.Example, "\n") {
			words := shellWords(t, strings.TrimSpace(line))
			if len(words) == 0 || words[0] != "tilectl" {
				continue
			}
			n++
			checkExample(t, strings.TrimSpace(line), words[1:])
		}
	}
	if n < 20 {
		t.Fatalf("checked %d example lines: the examples were not found", n)
	}
}

// checkExample parses args on a fresh command tree (flags keep their
// values between parses) and runs the checks cobra makes before a command
// runs, and the command's PreRunE.
func checkExample(t *testing.T, line string, args []string) {
	t.Helper()
	ios, _, _, _ := iostreams.Test()
	root := New(factory.NewWith(ios, func(string) (string, bool) { return "", false }, "test", "abc"))
	root.InitDefaultVersionFlag()
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Errorf("%s: %v", line, err)
		return
	}
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: flags: %v", line, err)
		return
	}
	for _, check := range []func() error{
		func() error { return cmd.ValidateArgs(cmd.Flags().Args()) },
		cmd.ValidateRequiredFlags,
		cmd.ValidateFlagGroups,
		func() error {
			if cmd.PreRunE == nil {
				return nil
			}
			return cmd.PreRunE(cmd, cmd.Flags().Args())
		},
	} {
		if err := check(); err != nil {
			t.Errorf("%s: %v", line, err)
			return
		}
	}
}

// Text for people says "1 tile" and "2 tiles" (iostreams.Count), never
// "tile(s)": no string in the commands' code leaves the plural open
// (internal/cli, cmd/tilectl, cmd/tileprovider).
func TestNoCommandTextLeavesThePluralToTheReader(t *testing.T) {
	fset := token.NewFileSet()
	var found int
	for _, dir := range []string{"..", "../../../cmd/tilectl", "../../../cmd/tileprovider"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			found++
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(lit.Value, "(s)") {
					t.Errorf("%s: %s leaves the plural to the reader: use iostreams.Count", fset.Position(lit.Pos()), lit.Value)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found < 20 {
		t.Fatalf("scanned %d files: the walk is broken", found)
	}
}
