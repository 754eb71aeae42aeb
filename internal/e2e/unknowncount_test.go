package e2e

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// dropDatabase ends every session of the site's database and drops it, as
// an operator's mistake or a lost disk would.
func (s *site) dropDatabase() {
	s.t.Helper()
	u, err := url.Parse(s.dbURL)
	if err != nil {
		s.t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		s.t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		s.t.Fatal(err)
	}
}

func TestACountLostWithTheDatabaseIsUnknownNotZeroAndItsErrorIsPrintedOnce(t *testing.T) {
	t.Parallel()
	for _, output := range []string{"text", "json"} {
		t.Run(output, func(t *testing.T) {
			t.Parallel()
			var s *site
			var once sync.Once
			// The database goes away while the first batch is at the
			// provider: its answer cannot be settled, nor anything counted.
			prov := refProvider(t, noFaults, func(string) { once.Do(func() { s.dropDatabase() }) })
			s = newSite(t, prov.URL)
			s.flight("gone1", 6)
			metrics := filepath.Join(t.TempDir(), "tilectl.prom")
			r := s.run(2*time.Minute, "upload-pending", "--flight", "gone1", "--batch-size", "2", "--concurrency", "1",
				"--deadline", "40s", "--metrics-file", metrics, "-o", output)
			if r.exit != 1 {
				t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
			}
			// Text: once on the screen; JSON: in its error field, and once
			// on stderr for the person watching.
			// The metrics file has no sample for a count it does not know.
			if b, err := os.ReadFile(metrics); err != nil {
				t.Errorf("no metrics file: %v", err)
			} else if text := string(b); strings.Contains(text, `tilectl_upload_pending_tiles{flight="gone1"}`) || strings.Contains(text, "NaN") {
				t.Errorf("the metrics file states an unknown pending count:\n%s", text)
			}
			all := r.stdout + r.stderr
			if output == "json" {
				all = r.stderr
			}
			if n := strings.Count(all, "3D000"); n != 1 {
				t.Errorf("the database error (SQLSTATE 3D000) is printed %d times, want once\nstdout:\n%s\nstderr:\n%s", n, r.stdout, r.stderr)
			}
			if !strings.Contains(all, "run upload-pending again once the database") {
				t.Errorf("no word of what to do about the database\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			if output == "json" {
				obj := oneJSONObject(t, r.stdout)
				if v, ok := obj["still_pending"]; !ok || v != nil {
					t.Errorf("still_pending %v, want null", v)
				}
				if v, ok := obj["still_pending_bytes"]; !ok || v != nil {
					t.Errorf("still_pending_bytes %v, want null", v)
				}
				flights, _ := obj["flights"].([]any)
				if len(flights) != 1 {
					t.Fatalf("flights %v, want one", obj["flights"])
				}
				if v := flights[0].(map[string]any)["still_pending"]; v != nil {
					t.Errorf("flights[0].still_pending %v, want null", v)
				}
				return
			}
			if strings.Contains(r.stdout, "0 still pending") || !strings.Contains(r.stdout, "still pending: unknown") {
				t.Errorf("summary does not say the pending count is unknown:\n%s", r.stdout)
			}
		})
	}
}
