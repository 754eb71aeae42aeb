// Package manpage writes a man page (section 1) for every command of a
// cobra command tree, with cobra's doc generator: what `make man` and the
// .deb ship. The pages come from the same commands, flags and examples as
// --help, so they cannot disagree with it.
package manpage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Write writes DIR/<command-path>.1 (tilectl.1, tilectl-tiles-import.1, ...)
// for root and every available command under it, and returns the paths
// written. source names the program and version for the page footer
// ("tilectl 1.4.0"). The date in the header is $SOURCE_DATE_EPOCH when set
// (reproducible builds), else today.
func Write(dir string, root *cobra.Command, source string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make the man page directory: %w", err)
	}
	defer plainText(root)() // help texts are plain text, the generator reads Markdown
	header := &doc.GenManHeader{Section: "1", Source: source, Manual: "tilectl manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return nil, fmt.Errorf("write man pages to %s: %w", dir, err)
	}
	var paths []string
	for _, c := range Commands(root) {
		paths = append(paths, filepath.Join(dir, PageName(c)))
	}
	return paths, nil
}

// Commands are the commands that get a page: root and every available
// command (not hidden, not deprecated, not help) under it.
func Commands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() {
			continue
		}
		out = append(out, Commands(c)...)
	}
	return out
}

// PageName is the file name of c's page: its command path joined by "-",
// in section 1.
func PageName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
}

// escapeMarkdown escapes what Markdown would read as markup (<flight> as an
// HTML tag, * and _ as emphasis, # as a heading), so that a page says what
// --help says. A line indented by a tab or four spaces is a code block,
// which Markdown shows as it is: it stays unescaped.
func escapeMarkdown(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "    ") {
			lines[i] = markdown.Replace(l)
		}
	}
	return strings.Join(lines, "\n")
}

var markdown = strings.NewReplacer(
	`\`, `\\`, "<", `\<`, ">", `\>`, "*", `\*`, "_", `\_`, "`", "\\`", "[", `\[`, "]", `\]`, "#", `\#`)

// plainText escapes the Short and Long texts of c and the commands under it
// for the generator, and drops cobra's "Auto generated" history section;
// the function it returns puts everything back.
func plainText(c *cobra.Command) (restore func()) {
	short, long, tag := c.Short, c.Long, c.DisableAutoGenTag
	c.Short, c.Long, c.DisableAutoGenTag = escapeMarkdown(short), escapeMarkdown(long), true
	var subs []func()
	for _, sub := range c.Commands() {
		subs = append(subs, plainText(sub))
	}
	return func() {
		c.Short, c.Long, c.DisableAutoGenTag = short, long, tag
		for _, r := range subs {
			r()
		}
	}
}
