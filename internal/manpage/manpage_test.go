package manpage_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/cli/root"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/manpage"
)

var space = regexp.MustCompile(`\s+`)

func squash(s string) string { return strings.TrimSpace(space.ReplaceAllString(s, " ")) }

// TestEveryCommandHasAManPageThatSaysWhatItsHelpSays generates the pages
// for the real command tree and reads each as man shows it: one page per
// command, a .TH header naming it, and the command's description and
// examples word for word (markup characters in the help must not be taken
// as Markdown or roff).
func TestEveryCommandHasAManPageThatSaysWhatItsHelpSays(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	tree := root.New(factory.NewWith(ios, func(string) (string, bool) { return "", false }, "1.2.3", "abc"))
	dir := t.TempDir()
	paths, err := manpage.Write(dir, tree, "tilectl 1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	cmds := manpage.Commands(tree)
	if len(paths) != len(cmds) || len(cmds) < 15 {
		t.Fatalf("%d pages for %d commands", len(paths), len(cmds))
	}
	manPath, _ := exec.LookPath("man")
	if manPath == "" {
		t.Log("man is not installed: the pages' text is not checked, only their .TH headers")
	}
	for i, c := range cmds {
		src, err := os.ReadFile(paths[i])
		if err != nil {
			t.Errorf("%s: no page: %v", c.CommandPath(), err)
			continue
		}
		name := strings.ToUpper(strings.TrimSuffix(manpage.PageName(c), ".1"))
		if want := `.TH "` + name + `" "1" `; !bytes.Contains(src, []byte("\n"+want)) && !bytes.HasPrefix(src, []byte(want)) {
			t.Errorf("%s: no %s... header", paths[i], want)
		}
		if !bytes.Contains(src, []byte(`"tilectl 1.2.3"`)) {
			t.Errorf("%s: the header does not name tilectl 1.2.3", paths[i])
		}
		if manPath == "" {
			continue
		}
		cmd := exec.Command(manPath, "--warnings", "-E", "UTF-8", "-l", "-P", "cat", paths[i])
		cmd.Env = append(os.Environ(), "MANWIDTH=2000", "LANG=C.UTF-8")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil || errOut.Len() > 0 {
			t.Errorf("man -l %s: %v\n%s", paths[i], err, errOut.String())
			continue
		}
		shown := squash(out.String())
		for _, part := range []struct{ what, text string }{{"description", c.Long}, {"examples", c.Example}, {"summary", c.Short}} {
			if want := squash(part.text); want != "" && !strings.Contains(shown, want) {
				t.Errorf("%s: the page does not show the %s as written:\nwant %q\npage %q", c.CommandPath(), part.what, want, shown)
			}
		}
	}
}
