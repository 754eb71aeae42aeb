package security

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/internal/testbin"
)

// leakToken is distinctive so a grep cannot match anything else.
const leakToken = "tok-LEAKCHECK-7c1e9a3f5b2d8e60-do-not-print"

// TestProviderTokenNeverLeaks runs a full upload against the reference
// provider with faults on (so errors, retries and give-ups are logged at
// debug level), plus runs that fail on a wrong token and an unreachable
// provider, and greps every output: stdout and stderr of each run, the
// metrics file, the FDR file and every file in the cache.
func TestProviderTokenNeverLeaks(t *testing.T) {
	provBin := testbin.Tileprovider(t)
	base, stopProvider := startReferenceProvider(t, provBin, leakToken)
	c := newCLI(t, base, leakToken)
	c.env = append(c.env, "TILECTL_LOG_LEVEL=debug")
	c.importFlight("leak", 12)
	metrics := filepath.Join(t.TempDir(), "metrics.prom")

	done := false
	for i := 0; i < 8 && !done; i++ {
		r := c.run(2*time.Minute, "upload-pending", "--flight", "leak", "-o", "json", "--metrics-file", metrics,
			"--backoff-base", "10ms", "--backoff-cap", "50ms", "--max-per-tile-attempts", "2", "--deadline", "30s")
		done = (r.exit == 0 || r.exit == 3) && c.count(`SELECT count(*) FROM tiles WHERE voting_status IN ('pending','trusted')`) == 0
	}
	if !done {
		t.Errorf("the flight did not settle in 8 runs")
	}
	// Positive control: the token did work, so the runs above really
	// talked to the provider with it.
	if n := c.count(`SELECT count(*) FROM tiles WHERE voting_status = 'uploaded'`); n == 0 {
		t.Fatalf("no tile uploaded: the runs never used the token")
	}
	c.mustRun("status", "-o", "json")
	c.mustRun("fdr", "tail", "-o", "json")
	c.run(time.Minute, "upload-pending", "--flight", "leak", "-o", "json", "--log-level", "trace", "--deadline", "10s")
	provStderr := stopProvider()

	// A provider that does not know the token: a 401 must not echo it.
	other, stopOther := startReferenceProvider(t, provBin, "some-other-token-0123456789")
	c.env = append(c.env, "TILECTL_PROVIDER_URL="+other)
	c.run(time.Minute, "tiles", "import", "--flight", "leak2", writeTilesDir(t, 2))
	c.land("leak2")
	if r := c.run(time.Minute, "upload-pending", "--flight", "leak2", "-o", "json", "--deadline", "10s"); r.exit == 0 {
		t.Errorf("upload with a wrong token exited 0")
	} else if !strings.Contains(r.stderr+r.stdout, "401") && !strings.Contains(r.stderr+r.stdout, "UNAUTHENTICATED") {
		t.Errorf("upload with a wrong token did not say 401:\n%s", clipped(r.stderr))
	}
	stopOther()
	// An unreachable provider: connection errors must not echo it either.
	c.env = append(c.env, "TILECTL_PROVIDER_URL=http://127.0.0.1:1")
	c.run(time.Minute, "upload-pending", "--flight", "leak2", "-o", "json", "--deadline", "5s")

	// The token from a file, and from a config file that is wrong in ways
	// whose errors might quote the line holding it.
	tokDir := t.TempDir()
	tokFile := filepath.Join(tokDir, "token")
	if err := os.WriteFile(tokFile, []byte(leakToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.run(time.Minute, "upload-pending", "--flight", "leak2", "-o", "json", "--deadline", "5s", "--provider-token-file", tokFile)
	for i, yml := range []string{
		"provider_token: " + leakToken + "\nbogus_key: 1\n",
		"provider_token: [" + leakToken + "\n",
		"provider_token:\n  nested: " + leakToken + "\n",
	} {
		cfgFile := filepath.Join(tokDir, fmt.Sprintf("bad%d.yaml", i))
		if err := os.WriteFile(cfgFile, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := c.run(time.Minute, "status", "-o", "json", "--config", cfgFile); r.exit == 0 {
			t.Errorf("a broken config file (%d) was accepted", i)
		}
	}

	for _, r := range c.outputs {
		for stream, text := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
			if strings.Contains(text, leakToken) {
				t.Errorf("tilectl %s: the token appears in %s", strings.Join(r.args, " "), stream)
			}
		}
	}
	files := []string{metrics, c.fdr}
	_ = filepath.Walk(c.cache, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("read %s: %v", f, err)
			continue
		}
		if bytes.Contains(b, []byte(leakToken)) {
			t.Errorf("the token appears in %s", f)
		}
	}
	if strings.Contains(provStderr, leakToken) {
		t.Errorf("the reference provider logged the token")
	}
	if len(c.outputs) < 6 {
		t.Errorf("only %d runs checked", len(c.outputs))
	}
}

func writeTilesDir(t *testing.T, n int) string {
	dir := t.TempDir()
	writeTiles(t, dir, n)
	return dir
}

// startReferenceProvider runs tileprovider with faults on and returns its
// base URL and a stop function that returns what it logged.
func startReferenceProvider(t *testing.T, bin, token string) (string, func() string) {
	t.Helper()
	addr := testbin.FreeAddr(t)
	dbURL := pgtest.NewEmptyDatabase(t)
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--listen", addr, "--database-url", dbURL, "--storage-dir", t.TempDir(),
		"--fault-rate", "0.3", "--fault-seed", "7",
		"--fault-kinds", "drop_after_store,status_429,status_503,html_502,cut_body,omit_results,processing_409",
		"--transient-reject-rate", "0.1")
	cmd.Env = append(os.Environ(), "TILEPROVIDER_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start provider: %v", err)
	}
	base := "http://" + addr
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		return logs.String()
	}
	t.Cleanup(func() { stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/capabilities", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base, stop
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("provider not ready: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
