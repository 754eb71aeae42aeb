// Package scripts_test checks the repository-wide lint that make lint (and
// so CI, via .ci/run) runs: go.mod is tidy and no tracked file holds a
// merge-conflict marker.
package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the module root: this package lives in scripts/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

func run(t *testing.T, dir, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		t.Fatalf("run %s %v: %v", name, args, err)
	}
	return string(out), 0
}

func TestMakeLintChecksTidinessAndConflictMarkers(t *testing.T) {
	out, code := run(t, repoRoot(t), "make", "-n", "lint")
	if code != 0 {
		t.Fatalf("make -n lint: exit %d\n%s", code, out)
	}
	for _, want := range []string{"mod tidy -diff", "scripts/conflict-markers.sh"} {
		if !strings.Contains(out, want) {
			t.Errorf("make lint does not run %q; it runs:\n%s", want, out)
		}
	}
}

func TestGoModIsTidy(t *testing.T) {
	if out, code := run(t, repoRoot(t), "go", "mod", "tidy", "-diff"); code != 0 {
		t.Fatalf("go mod tidy -diff: exit %d (run go mod tidy):\n%s", code, out)
	}
}

func TestTrackedFilesHoldNoConflictMarkers(t *testing.T) {
	root := repoRoot(t)
	if out, code := run(t, root, filepath.Join(root, "scripts", "conflict-markers.sh")); code != 0 {
		t.Fatalf("conflict-markers.sh: exit %d\n%s", code, out)
	}
}

func TestConflictMarkerCheckFailsOnCommittedMarkerOnly(t *testing.T) {
	script := filepath.Join(repoRoot(t), "scripts", "conflict-markers.sh")
	lt, gt, bar := strings.Repeat("<", 7), strings.Repeat(">", 7), strings.Repeat("|", 7)
	clean := map[string]string{
		// A Markdown heading underline and markers that do not start a line.
		"docs/guide.md": "Title\n=======\n\nGit writes `" + lt + " HEAD` into a conflicted file.\n",
		// Fixtures may hold markers on purpose.
		"pkg/testdata/conflicted.txt": lt + " ours\na\n=======\nb\n" + gt + " theirs\n",
		"untracked-is-ignored.txt":    "",
	}
	cases := []struct {
		name, file, body string
	}{
		{"ours marker", "a.go", "package a\n" + lt + " HEAD\n"},
		{"theirs marker", "docs/x.md", "text\n" + gt + " branch\n"},
		{"diff3 base marker", "b.txt", bar + " base\n"},
		{"bare marker", "c.txt", lt + "\n"},
	}
	t.Run("clean tree passes", func(t *testing.T) {
		dir := gitRepo(t, clean, nil)
		if out, code := run(t, dir, script); code != 0 {
			t.Fatalf("exit %d on a tree without conflicts:\n%s", code, out)
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := gitRepo(t, clean, map[string]string{tc.file: tc.body})
			out, code := run(t, dir, script)
			if code != 1 || !strings.Contains(out, tc.file) {
				t.Fatalf("exit %d, want 1 naming %s:\n%s", code, tc.file, out)
			}
		})
	}
}

// gitRepo makes a git repository tracking files and extra (all but a file
// named untracked-*), and returns its directory.
func gitRepo(t *testing.T, files, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if out, code := run(t, dir, "git", "init", "-q"); code != 0 {
		t.Fatalf("git init: %s", out)
	}
	for _, m := range []map[string]string{files, extra} {
		for name, body := range m {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(filepath.Base(name), "untracked-") {
				continue
			}
			if out, code := run(t, dir, "git", "add", name); code != 0 {
				t.Fatalf("git add %s: %s", name, out)
			}
		}
	}
	return dir
}
