package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// The README's unit examples are the files the package installs: each
// ```ini block starts with a "# /usr/lib/systemd/system/NAME" line and the
// rest is packaging/systemd/NAME byte for byte; every unit is shown.
func TestTheREADMEShowsTheSystemdUnitsThePackageInstalls(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	units, err := filepath.Glob(filepath.Join(root, "packaging", "systemd", "*"))
	if err != nil || len(units) == 0 {
		t.Fatalf("no units in packaging/systemd (%v)", err)
	}
	shown := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```ini\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		first, body, _ := strings.Cut(m[1], "\n")
		name, ok := strings.CutPrefix(first, "# /usr/lib/systemd/system/")
		if !ok {
			t.Errorf("an ini block in the README starts with %q, want # /usr/lib/systemd/system/NAME", first)
			continue
		}
		shown[name] = body
	}
	for _, u := range units {
		want, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := shown[filepath.Base(u)]
		if !ok {
			t.Errorf("the README shows no %s", filepath.Base(u))
		} else if got != string(want) {
			t.Errorf("the README's %s differs from packaging/systemd:\nREADME:\n%s\nfile:\n%s", filepath.Base(u), got, want)
		}
		delete(shown, filepath.Base(u))
	}
	for name := range shown {
		t.Errorf("the README shows %s, which packaging/systemd does not hold", name)
	}
}

// make package's script builds a .deb holding the binary, a man page per
// command, completions where bash, zsh and fish look for them, the units
// and the example config (a conffile); installed with dpkg -i, the binary
// runs, the pages render and the units verify, and dpkg --purge removes
// every file it installed.
func TestThePackageInstallsRunsAndRemovesCleanly(t *testing.T) {
	for _, tool := range []string{"dpkg", "dpkg-deb", "dpkg-query"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed, so the .deb cannot be checked: apt-get install dpkg (make test installs it)", tool)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("installing the package needs root: run the tests as root, as CI does")
	}
	if st, err := exec.Command("dpkg-query", "-W", "-f", "${Status}", "tilectl").Output(); err == nil &&
		strings.Contains(string(st), "installed") && !strings.Contains(string(st), "not-installed") {
		t.Fatalf("a tilectl package is installed on this machine (%s); the test would replace it: dpkg --purge tilectl first", st)
	}
	root := repoRoot(t)
	dist := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "scripts", "package.sh"))
	cmd.Dir = root
	cmd.Env = append(testbin.Environ("VERSION=", "COMMIT=", "DIST=", "GOARCH="),
		"TILECTL_BIN="+testbin.Tilectl(t), "VERSION=v"+testbin.Version+"-4-gabcdef0", "COMMIT="+testbin.Commit, "DIST="+dist)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/package.sh: %v\n%s", err, stderr.String())
	}
	deb := strings.TrimSpace(string(out))
	if !strings.HasPrefix(filepath.Base(deb), "tilectl_"+testbin.Version+"+4.gabcdef0_") || !strings.HasSuffix(deb, ".deb") {
		t.Errorf("package.sh wrote %q, want tilectl_%s+4.gabcdef0_<arch>.deb", deb, testbin.Version)
	}
	if v := dpkgDeb(t, "-f", deb, "Version"); v != testbin.Version+"+4.gabcdef0" {
		t.Errorf("control Version %q", v)
	}
	if r := dpkgDeb(t, "-f", deb, "Recommends"); !strings.Contains(r, "bash-completion") {
		t.Errorf("control Recommends %q, want bash-completion", r)
	}

	listing := dpkgDeb(t, "-c", deb)
	files := map[string]bool{}
	for _, l := range strings.Split(listing, "\n") {
		if f := strings.Fields(l); len(f) >= 6 {
			files[strings.TrimPrefix(f[5], ".")] = true
		}
	}
	want := []string{
		"/usr/bin/tilectl",
		"/etc/tilectl/config.yaml",
		"/usr/share/bash-completion/completions/tilectl",
		"/usr/share/zsh/vendor-completions/_tilectl",
		"/usr/share/fish/vendor_completions.d/tilectl.fish",
		"/usr/lib/systemd/system/tilectl-upload.service",
		"/usr/lib/systemd/system/tilectl-upload.timer",
		"/usr/lib/sysusers.d/tilectl.conf",
		"/usr/lib/tmpfiles.d/tilectl.conf",
	}
	for _, page := range []string{"tilectl", "tilectl-upload-pending", "tilectl-tiles-import", "tilectl-status",
		"tilectl-migrate-up", "tilectl-fdr-tail", "tilectl-config-view", "tilectl-version", "tilectl-tiles-requeue"} {
		want = append(want, "/usr/share/man/man1/"+page+".1.gz")
	}
	for _, p := range want {
		if !files[p] {
			t.Errorf("the package has no %s; it holds:\n%s", p, listing)
		}
	}
	x := t.TempDir()
	dpkgDeb(t, "-e", deb, x)
	if b, err := os.ReadFile(filepath.Join(x, "conffiles")); err != nil || strings.TrimSpace(string(b)) != "/etc/tilectl/config.yaml" {
		t.Errorf("conffiles %q (%v), want /etc/tilectl/config.yaml", b, err)
	}

	mustRun(t, "dpkg", "-i", deb)
	installed := strings.Fields(mustRun(t, "dpkg-query", "-L", "tilectl"))
	t.Cleanup(func() { // a failed check must not leave the package behind
		_ = exec.Command("dpkg", "--purge", "tilectl").Run()
	})
	if b, err := exec.Command("/usr/bin/tilectl", "--version").Output(); err != nil || !strings.Contains(string(b), testbin.Version) {
		t.Errorf("the installed /usr/bin/tilectl --version: %v %q", err, b)
	}
	c := exec.Command("man", "--warnings", "-P", "cat", "tilectl-upload-pending")
	c.Env = append(os.Environ(), "MANWIDTH=100", "MANPATH=/usr/share/man")
	var errOut bytes.Buffer
	c.Stderr = &errOut
	if b, err := c.Output(); err != nil || errOut.Len() > 0 || !strings.Contains(string(b), "tilectl upload-pending") {
		t.Errorf("man tilectl-upload-pending, installed: %v\n%s\n%s", err, errOut.String(), b)
	}
	verifyUnits(t, "/")

	mustRun(t, "dpkg", "--purge", "tilectl")
	for _, p := range installed {
		fi, err := os.Lstat(p)
		if err != nil || fi.IsDir() { // directories shared with other packages stay
			continue
		}
		t.Errorf("%s is still there after dpkg --purge tilectl", p)
	}
	if _, err := os.Stat("/etc/tilectl/config.yaml"); err == nil {
		t.Error("/etc/tilectl/config.yaml is still there after dpkg --purge tilectl")
	}
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, b)
	}
	return string(b)
}

// verifyUnits runs systemd-analyze verify on the unpacked units, the
// service's ExecStart pointed at the unpacked binary and man at the
// unpacked pages (verify checks both exist); any warning fails.
func verifyUnits(t *testing.T, x string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the units are not verified")
		return
	}
	dir := t.TempDir()
	for _, name := range []string{"tilectl-upload.service", "tilectl-upload.timer"} {
		b, err := os.ReadFile(filepath.Join(x, "usr/lib/systemd/system", name))
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("ExecStart=/usr/bin/tilectl"), []byte("ExecStart="+filepath.Join(x, "usr/bin/tilectl")))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := exec.Command(analyze, "verify", filepath.Join(dir, "tilectl-upload.service"), filepath.Join(dir, "tilectl-upload.timer"))
	c.Env = append(os.Environ(), "MANPATH="+filepath.Join(x, "usr/share/man"))
	if b, err := c.CombinedOutput(); err != nil || len(b) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, b)
	}
}

func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	b, err := exec.Command("dpkg-deb", args...).Output()
	if err != nil {
		t.Fatalf("dpkg-deb %v: %v", args, err)
	}
	return strings.TrimSpace(string(b))
}
