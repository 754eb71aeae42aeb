package e2e

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/testbin"
)

// failFastLimit is the promise: a wrong provider URL is reported
// within seconds, not after minutes of retries.
const failFastLimit = 10 * time.Second

func refusedURL(t *testing.T) string {
	t.Helper()
	return "http://" + testbin.FreeAddr(t) // nothing listens there: connections are refused
}

func TestWrongProviderFailsFastNamingProviderURLAndItsSource(t *testing.T) {
	t.Parallel()
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><html><body>Welcome to nginx!</body></html>"))
	}))
	t.Cleanup(html.Close)
	wrongShape := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok","service":"grafana"}`))
	}))
	t.Cleanup(wrongShape.Close)

	for _, tc := range []struct {
		name, url, want string
	}{
		{"refused port", refusedURL(t), "connection refused"},
		{"HTML server", html.URL, "not JSON"},
		{"JSON of another shape", wrongShape.URL, "another shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSite(t, tc.url)
			s.flight("ff1", 3)
			r := s.run(time.Minute, "upload-pending", "--flight", "ff1")
			if r.took > failFastLimit {
				t.Errorf("took %s, want under %s", r.took, failFastLimit)
			}
			if r.exit != 1 {
				t.Errorf("exit %d, want 1", r.exit)
			}
			for _, want := range []string{tc.want, "provider_url " + tc.url, "env TILECTL_PROVIDER_URL"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
		})
	}
}

func TestAuthErrorNamesTheRealTokenSource(t *testing.T) {
	t.Parallel()
	prov := refProvider(t, noFaults, nil)
	s := newSite(t, prov.URL)
	s.flight("auth1", 2)
	tokFile := t.TempDir() + "/token"
	writeFile(t, tokFile, "wrong-token-from-file\n", 0o600)
	r := s.run(time.Minute, "upload-pending", "--flight", "auth1", "--provider-token-file", tokFile)
	if r.exit != 1 || !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "flag --provider-token-file (file "+tokFile+")") {
		t.Fatalf("exit %d, want 1 and a 401 naming --provider-token-file:\n%s", r.exit, r.stderr)
	}
	if strings.Contains(r.stderr, "TILECTL_PROVIDER_TOKEN") {
		t.Fatalf("blames TILECTL_PROVIDER_TOKEN though the token came from a file:\n%s", r.stderr)
	}
}

func TestEmptyTokenIsRefusedBeforeAnythingIsSent(t *testing.T) {
	t.Parallel()
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits++ }))
	t.Cleanup(srv.Close)
	s := newSite(t, srv.URL)
	s.flight("empty1", 1)
	s.env = append(s.env, "TILECTL_PROVIDER_TOKEN=")
	r := s.run(time.Minute, "upload-pending", "--flight", "empty1")
	if r.exit != 2 || !strings.Contains(r.stderr, "no provider token") || hits != 0 {
		t.Fatalf("exit %d, %d requests, stderr:\n%s\nwant exit 2, no request, 'no provider token'", r.exit, hits, r.stderr)
	}
}

// silentListener accepts connections on loopback and never writes a byte:
// a stuck modem, a captive portal that swallows the request.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

func TestProviderThatAcceptsAndNeverAnswersFailsFastNamingURLAndItsSource(t *testing.T) {
	t.Parallel()
	url := silentListener(t)
	s := newSite(t, url)
	s.flight("silent1", 2)
	r := s.run(time.Minute, "upload-pending", "--flight", "silent1")
	t.Logf("took %s", r.took)
	if r.took > failFastLimit {
		t.Errorf("took %s, want under %s", r.took, failFastLimit)
	}
	if r.exit != 1 {
		t.Errorf("exit %d, want 1", r.exit)
	}
	for _, want := range []string{"no answer", "provider_url " + url, "env TILECTL_PROVIDER_URL", "upload.first_contact_timeout"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

func TestProviderURLWithAnExtraPathAsksWhetherItIsTheBaseURL(t *testing.T) {
	t.Parallel()
	prov := refProvider(t, noFaults, nil)
	s := newSite(t, prov.URL)
	s.flight("path1", 2)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, "provider_url: "+prov.URL+"/v1\n", 0o600)
	s.env = slices.DeleteFunc(s.env, func(kv string) bool { return strings.HasPrefix(kv, "TILECTL_PROVIDER_URL=") })
	r := s.run(time.Minute, "upload-pending", "--flight", "path1", "--config", cfg)
	if r.took > failFastLimit {
		t.Errorf("took %s, want under %s", r.took, failFastLimit)
	}
	if r.exit != 1 {
		t.Errorf("exit %d, want 1", r.exit)
	}
	for _, want := range []string{"provider_url " + prov.URL + "/v1", "file " + cfg + ":1", "is this the provider's base URL?"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}
