package security

import (
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestTLSCertificateIsVerifiedByDefault points tilectl at an HTTPS provider
// with a self-signed certificate: the run must fail on the certificate and
// send no batch. Only --insecure-skip-verify lets it through, with a
// warning.
func TestTLSCertificateIsVerifiedByDefault(t *testing.T) {
	fake := &fakeProvider{}
	srv := httptest.NewUnstartedServer(fake)
	// The refused handshakes are the point; keep them out of the test log.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	c := newCLI(t, srv.URL, "tls-test-token-0123456789")
	c.importFlight("tls-flight", 3)

	r := c.run(time.Minute, "upload-pending", "--flight", "tls-flight", "-o", "json", "--deadline", "20s")
	if r.exit == 0 {
		t.Fatalf("upload to a self-signed provider succeeded without --insecure-skip-verify\nstderr: %s", r.stderr)
	}
	if !strings.Contains(strings.ToLower(r.stderr), "certificate") {
		t.Errorf("the error does not say the certificate was refused:\n%s", r.stderr)
	}
	if n := fake.batches.Load(); n != 0 {
		t.Errorf("the provider received %d batches over an unverified connection", n)
	}
	if n := c.count(`SELECT count(*) FROM tiles WHERE voting_status = 'uploaded'`); n != 0 {
		t.Errorf("%d tiles marked uploaded after a refused certificate", n)
	}

	r = c.run(time.Minute, "upload-pending", "--flight", "tls-flight", "-o", "json", "--deadline", "20s", "--insecure-skip-verify")
	if r.exit != 0 {
		t.Fatalf("--insecure-skip-verify: exit %d\nstderr: %s", r.exit, r.stderr)
	}
	if !hasWarning(r.stderr, "insecure-skip-verify") {
		t.Errorf("--insecure-skip-verify logged no warning naming it:\n%s", r.stderr)
	}
	if n := c.count(`SELECT count(*) FROM tiles WHERE voting_status = 'uploaded'`); n != 3 {
		t.Errorf("%d of 3 tiles uploaded with --insecure-skip-verify", n)
	}
}

// hasWarning reports whether a line of a log is a warning that mentions
// what (case-insensitive), in either log format.
func hasWarning(log, what string) bool {
	for _, line := range strings.Split(strings.ToLower(log), "\n") {
		warn := strings.Contains(line, `"level":"warn"`) || strings.Contains(line, "wrn") || strings.Contains(line, "warn")
		if warn && strings.Contains(line, strings.ToLower(what)) {
			return true
		}
	}
	return false
}
