package e2e

import (
	"strings"
	"testing"
	"time"
)

// completions runs cobra's hidden __complete command the way a shell's
// completion script does and returns the offered values and the directive.
func completions(t *testing.T, s *site, args ...string) ([]string, string) {
	t.Helper()
	r := s.run(30*time.Second, append([]string{"__complete"}, args...)...)
	if r.exit != 0 {
		t.Fatalf("__complete %v: exit %d\n%s", args, r.exit, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var values []string
	for _, l := range lines[:len(lines)-1] {
		v, _, _ := strings.Cut(l, "\t")
		values = append(values, v)
	}
	return values, lines[len(lines)-1]
}

func TestCompletionOffersFlightsFromTheDatabaseAndEnumValues(t *testing.T) {
	t.Parallel()
	s := newSite(t, refusedURL(t))
	s.flight("alpha-1", 1)
	s.flight("alpha-2", 1)
	s.flight("bravo-1", 1)

	got, dir := completions(t, s, "upload-pending", "--flight", "alp")
	if strings.Join(got, ",") != "alpha-1,alpha-2" || dir != ":4" {
		t.Errorf("--flight alp completes to %v (directive %s), want alpha-1,alpha-2 and no file names (:4)", got, dir)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--flight", ""}, "alpha-1,alpha-2,bravo-1"},
		{[]string{"status", "-o", ""}, "text,json"},
		{[]string{"migrate", "up", "-o", ""}, "text,json"},
		{[]string{"tiles", "import", "--state", ""}, "on_ground,airborne"},
		{[]string{"fdr", "tail", "--kind", ""}, "upload.giveup,upload.requeue,upload.reconcile,flight.landed,flight.deleted"},
		{[]string{"--log-level", ""}, "trace,debug,info,warn,error"},
	} {
		if got, dir := completions(t, s, tc.args...); strings.Join(got, ",") != tc.want || dir != ":4" {
			t.Errorf("%v completes to %v (directive %s), want %s and no file names", tc.args, got, dir, tc.want)
		}
	}

	// No database: nothing offered, nothing printed, no error.
	s.env = append(s.env, "TILECTL_DATABASE_URL=postgres://postgres@127.0.0.1:1/none?sslmode=disable")
	start := time.Now()
	r := s.run(30*time.Second, "__complete", "upload-pending", "--flight", "")
	if r.exit != 0 || strings.TrimSpace(r.stdout) != ":4" || time.Since(start) > 5*time.Second {
		t.Errorf("without a database: exit %d, stdout %q, took %s; want exit 0, only the directive, quickly", r.exit, r.stdout, time.Since(start))
	}
}

func TestVersionFlagPrintsSemverAndCommit(t *testing.T) {
	t.Parallel()
	s := newSite(t, refusedURL(t))
	r := s.mustRun("--version")
	if strings.TrimSpace(r.stdout) != "tilectl 1.2.3 (commit e2e0c0mm1t)" {
		t.Fatalf("--version printed %q", r.stdout)
	}
}
