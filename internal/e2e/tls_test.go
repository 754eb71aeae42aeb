package e2e

import (
	"crypto/tls"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/testpki"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// TestUploadAndReconcileOverMutualTLSWithAPrivateCA serves the reference
// provider over TLS with a certificate of its own CA, requiring a client
// certificate of another, and drives the real binary against it.
func TestUploadAndReconcileOverMutualTLSWithAPrivateCA(t *testing.T) {
	t.Parallel()
	ca, clients := testpki.NewCA(t, "provider private CA"), testpki.NewCA(t, "ground stations")
	prov := providertest.Start(t, func(c *provider.Config) { c.Token = token; c.SkipFsync = true })
	srv := httptest.NewUnstartedServer(prov.Server.Handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: clients.Pool(), MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	s := newSite(t, srv.URL)
	pki := t.TempDir()
	station := clients.Client(t, "station-7", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	caFile := testpki.Write(t, pki, "ca.pem", ca.PEM)
	certFile := testpki.Write(t, pki, "station.pem", station.CertPEM)
	keyFile := testpki.Write(t, pki, "station.key", station.KeyPEM)
	s.env = append(s.env, "TILECTL_PROVIDER_CA_FILE="+caFile, "TILECTL_PROVIDER_CLIENT_CERT="+certFile,
		"TILECTL_PROVIDER_CLIENT_KEY="+keyFile)

	s.flight("TLS-1", 12)
	s.mustRun("upload-pending", "--flight", "TLS-1", "--quiet")
	if r := s.run(time.Minute, "tiles", "reconcile", "--flight", "TLS-1"); r.exit != 0 {
		t.Fatalf("reconcile over mutual TLS: exit %d\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}

	// Without the CA file the handshake fails, and the error says which
	// option is missing. (An empty variable counts as unset.)
	noCA := s.run(time.Minute, "tiles", "reconcile", "--flight", "TLS-1", "--provider-ca-file", "")
	if !strings.Contains(noCA.stderr, "provider_ca_file") && !strings.Contains(noCA.stderr, "provider-ca-file") {
		t.Fatalf("without the CA file: exit %d, stderr does not name the CA option:\n%s", noCA.exit, noCA.stderr)
	}
	if noCA.exit == 0 || noCA.exit == 3 {
		t.Fatalf("without the CA file: exit %d, want a failure", noCA.exit)
	}

	// A key that is not the certificate's is refused at start (exit 2),
	// naming the file and the flag it came from, before anything is sent.
	other := clients.Client(t, "someone else", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	wrongKey := testpki.Write(t, pki, "other.key", other.KeyPEM)
	r := s.run(time.Minute, "upload-pending", "--flight", "TLS-1", "--provider-client-key", wrongKey)
	if r.exit != 2 || !strings.Contains(r.stderr, "provider_client_key (from flag --provider-client-key)") ||
		!strings.Contains(r.stderr, wrongKey) || !strings.Contains(r.stderr, certFile) {
		t.Fatalf("wrong key: exit %d, want 2 naming the key file, its flag and the certificate\nstderr: %s", r.exit, r.stderr)
	}

	// config view shows the key's path, never its contents.
	view := s.mustRun("config", "view")
	if !strings.Contains(view.stdout, keyFile) || strings.Contains(view.stdout, "PRIVATE KEY") ||
		strings.Contains(view.stdout, string(station.KeyPEM[40:80])) {
		t.Fatalf("config view must show the key's path and not its contents:\n%s", view.stdout)
	}
}
