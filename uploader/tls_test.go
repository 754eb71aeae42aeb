package uploader_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/testpki"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// tlsProvider serves GET /v1/capabilities over TLS on loopback with a
// certificate of ca; clientCA, when not nil, is required to have signed a
// client certificate.
func tlsProvider(t *testing.T, ca, clientCA *testpki.CA) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"api_version":"v1","max_batch_tiles":256}`))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		srv.TLS.ClientAuth, srv.TLS.ClientCAs = tls.RequireAndVerifyClientCert, clientCA.Pool()
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// tlsOf is config.ProviderTLS for files written from PEM (nil: unset).
func tlsOf(t *testing.T, caPEM, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	dir := t.TempDir()
	c := config.Default(nil)
	if caPEM != nil {
		c.ProviderCAFile = testpki.Write(t, dir, "ca.pem", caPEM)
	}
	if certPEM != nil {
		c.ProviderClientCert = testpki.Write(t, dir, "client.pem", certPEM)
		c.ProviderClientKey = testpki.Write(t, dir, "client.key", keyPEM)
	}
	conf, err := c.ProviderTLS(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func capabilitiesOver(t *testing.T, url string, conf *tls.Config) error {
	t.Helper()
	c := providertest.NewClient(t, "TLS-1")
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) { o.TLS, o.FirstContactTimeout = conf, 5*time.Second })
	_, err := u.Capabilities(testCtx(t))
	return err
}

func TestAProviderBehindAPrivateCAIsReachedWithItsCAFileAndNamesTheOptionWithout(t *testing.T) {
	t.Parallel()
	ca := testpki.NewCA(t, "provider private CA")
	url := tlsProvider(t, ca, nil)
	err := capabilitiesOver(t, url, nil)
	if err == nil || !strings.Contains(err.Error(), "provider_ca_file") {
		t.Fatalf("without the CA file: %v; want an error naming provider_ca_file", err)
	}
	if err := capabilitiesOver(t, url, tlsOf(t, ca.PEM, nil, nil)); err != nil {
		t.Fatalf("with the CA file: %v", err)
	}
}

func TestAProviderThatRequiresAClientCertificateGetsTheConfiguredOne(t *testing.T) {
	t.Parallel()
	ca := testpki.NewCA(t, "provider private CA")
	clients := testpki.NewCA(t, "ground stations")
	url := tlsProvider(t, ca, clients)
	err := capabilitiesOver(t, url, tlsOf(t, ca.PEM, nil, nil))
	if err == nil || !strings.Contains(err.Error(), "provider_client_cert") {
		t.Fatalf("without a client certificate: %v; want an error naming provider_client_cert", err)
	}
	station := clients.Client(t, "station-7", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err := capabilitiesOver(t, url, tlsOf(t, ca.PEM, station.CertPEM, station.KeyPEM)); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
}

// A lookup of a provider whose certificate is not trusted got no answer,
// and the classifier does not resend it (the same certificate comes
// back): it is final, so a caller does not ask again after a pause.
func TestALookupRefusedForAnUntrustedCertificateIsFinal(t *testing.T) {
	t.Parallel()
	url := tlsProvider(t, testpki.NewCA(t, "provider private CA"), nil)
	c := providertest.NewClient(t, "TLS-L")
	tiles := c.AddTiles(t, "TLS-L", 1, 512, 1)
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) { o.FirstContactTimeout = 5 * time.Second })
	l, err := u.LookUpTile(testCtx(t), "TLS-L", tiles[0])
	if err != nil {
		t.Fatalf("look up: %v", err)
	}
	if l.Verdict != uploader.Unclear || l.Status != 0 || !l.Final {
		t.Fatalf("lookup %+v, want Unclear, no status and Final", l)
	}
}
