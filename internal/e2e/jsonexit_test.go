package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// oneJSONObject parses stdout as exactly one JSON object and nothing else.
func oneJSONObject(t *testing.T, stdout string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not one JSON object (%v):\n%q", err, stdout)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		t.Fatalf("stdout holds more than one JSON value (%v):\n%s", err, stdout)
	}
	return obj
}

func TestJSONOutputIsOneObjectWhenTheRunFailsBeforeUploading(t *testing.T) {
	t.Parallel()
	prov := refProvider(t, noFaults, nil)
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, s *site)
		args    []string
		exit    int
		inError string
	}{
		{
			name:    "missing token",
			setup:   func(t *testing.T, s *site) { s.env = append(s.env, "TILECTL_PROVIDER_TOKEN=") },
			exit:    2,
			inError: "no provider token",
		},
		{
			name: "database unreachable",
			setup: func(t *testing.T, s *site) {
				s.env = append(s.env, "TILECTL_DATABASE_URL=postgres://postgres@"+refusedAddr(t)+"/nowhere?sslmode=disable")
			},
			args:    []string{"--deadline", "5s"},
			exit:    1,
			inError: "tile store",
		},
		{
			name: "flight data recorder locked past the deadline",
			setup: func(t *testing.T, s *site) {
				path := filepath.Join(t.TempDir(), "fdr.ring")
				f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = f.Close() })
				// Another process's lock, as far as tilectl can tell.
				if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
					t.Fatal(err)
				}
				s.env = append(s.env, "TILECTL_FDR_PATH="+path)
			},
			args:    []string{"--deadline", "2s"},
			exit:    1,
			inError: "flight data recorder",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSite(t, prov.URL)
			s.flight("js1", 2)
			tc.setup(t, s)
			r := s.run(time.Minute, append([]string{"upload-pending", "--flight", "js1", "-o", "json"}, tc.args...)...)
			if r.exit != tc.exit {
				t.Fatalf("exit %d, want %d; stderr:\n%s", r.exit, tc.exit, r.stderr)
			}
			obj := oneJSONObject(t, r.stdout)
			if obj["outcome"] != "failure" {
				t.Errorf("outcome %v, want failure", obj["outcome"])
			}
			if code, _ := obj["exit_code"].(float64); int(code) != tc.exit {
				t.Errorf("exit_code %v, want %d", obj["exit_code"], tc.exit)
			}
			if msg, _ := obj["error"].(string); !strings.Contains(msg, tc.inError) {
				t.Errorf("error %q lacks %q", obj["error"], tc.inError)
			}
			// Nothing was counted: the count of what is left is not known.
			if v, ok := obj["still_pending"]; !ok || v != nil {
				t.Errorf("still_pending %v (present %v), want null", v, ok)
			}
			if bytes.Contains([]byte(r.stdout+r.stderr), []byte(token)) {
				t.Error("the provider token is printed")
			}
		})
	}
}

// refusedAddr is a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	return strings.TrimPrefix(refusedURL(t), "http://")
}
