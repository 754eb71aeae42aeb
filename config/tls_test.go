package config_test

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/testpki"
)

// loadTLS loads a configuration whose TLS options come from the
// environment, completed; the errors are Validate's.
func loadTLS(t *testing.T, env map[string]string) (*config.Config, error) {
	t.Helper()
	c, err := config.Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	c.Complete()
	return c, c.Validate()
}

func TestProviderTLSAddsTheCAToTheSystemRootsAndLoadsTheClientCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "private provider CA")
	client := ca.Client(t, "ground station", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	c, err := loadTLS(t, map[string]string{
		"TILECTL_PROVIDER_CA_FILE":     testpki.Write(t, dir, "ca.pem", ca.PEM),
		"TILECTL_PROVIDER_CLIENT_CERT": testpki.Write(t, dir, "client.pem", client.CertPEM),
		"TILECTL_PROVIDER_CLIENT_KEY":  testpki.Write(t, dir, "client.key", client.KeyPEM),
	})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := c.ProviderTLS(time.Now())
	if err != nil || conf == nil {
		t.Fatalf("ProviderTLS = %v, %v", conf, err)
	}
	server := ca.Server(t)
	leaf, _ := x509.ParseCertificate(server.TLS.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: conf.RootCAs}); err != nil {
		t.Fatalf("a certificate of the private CA does not verify against the roots: %v", err)
	}
	if sys, err := x509.SystemCertPool(); err == nil && len(sys.Subjects()) > 0 { //nolint:staticcheck // counting is enough
		if got := len(conf.RootCAs.Subjects()); got != len(sys.Subjects())+1 { //nolint:staticcheck
			t.Fatalf("roots hold %d subjects, want the system's %d plus the CA", got, len(sys.Subjects())) //nolint:staticcheck
		}
	}
	if len(conf.Certificates) != 1 {
		t.Fatalf("client certificates: %d, want 1", len(conf.Certificates))
	}
	if none, err := config.Default(nil).ProviderTLS(time.Now()); none != nil || err != nil {
		t.Fatalf("with no TLS option set: %v, %v; want nil, nil", none, err)
	}
}

func TestProviderTLSErrorsNameTheOptionTheFileAndWhereItCameFrom(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "private provider CA")
	good := ca.Client(t, "ground station", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	other := ca.Client(t, "someone else", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	expired := ca.Client(t, "old", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	future := ca.Client(t, "early", time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour))
	cert := testpki.Write(t, dir, "client.pem", good.CertPEM)
	key := testpki.Write(t, dir, "client.key", good.KeyPEM)
	notPEM := testpki.Write(t, dir, "notes.txt", []byte("not a certificate\n"))
	unreadable := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"CA file unreadable", map[string]string{"TILECTL_PROVIDER_CA_FILE": unreadable},
			[]string{"provider_ca_file (from env TILECTL_PROVIDER_CA_FILE)", unreadable, "readable", "no such file"}},
		{"CA file not PEM", map[string]string{"TILECTL_PROVIDER_CA_FILE": notPEM},
			[]string{"provider_ca_file (from env TILECTL_PROVIDER_CA_FILE)", notPEM, "holds none"}},
		{"client cert not PEM", map[string]string{"TILECTL_PROVIDER_CLIENT_CERT": notPEM, "TILECTL_PROVIDER_CLIENT_KEY": key},
			[]string{"provider_client_cert (from env TILECTL_PROVIDER_CLIENT_CERT)", notPEM, "certificate"}},
		{"key not PEM", map[string]string{"TILECTL_PROVIDER_CLIENT_CERT": cert, "TILECTL_PROVIDER_CLIENT_KEY": notPEM},
			[]string{"provider_client_key (from env TILECTL_PROVIDER_CLIENT_KEY)", notPEM, "private key"}},
		{"key does not match", map[string]string{"TILECTL_PROVIDER_CLIENT_CERT": cert,
			"TILECTL_PROVIDER_CLIENT_KEY": testpki.Write(t, dir, "other.key", other.KeyPEM)},
			[]string{"provider_client_key (from env TILECTL_PROVIDER_CLIENT_KEY)", "other.key", "must be the private key of the certificate in " + cert}},
		{"client cert expired", map[string]string{"TILECTL_PROVIDER_CLIENT_CERT": testpki.Write(t, dir, "old.pem", expired.CertPEM),
			"TILECTL_PROVIDER_CLIENT_KEY": testpki.Write(t, dir, "old.key", expired.KeyPEM)},
			[]string{"provider_client_cert (from env TILECTL_PROVIDER_CLIENT_CERT)", "old.pem", "expired on"}},
		{"client cert not yet valid", map[string]string{"TILECTL_PROVIDER_CLIENT_CERT": testpki.Write(t, dir, "early.pem", future.CertPEM),
			"TILECTL_PROVIDER_CLIENT_KEY": testpki.Write(t, dir, "early.key", future.KeyPEM)},
			[]string{"provider_client_cert", "early.pem", "not valid before"}},
		{"key without cert", map[string]string{"TILECTL_PROVIDER_CLIENT_KEY": key},
			[]string{"provider_client_key (from env TILECTL_PROVIDER_CLIENT_KEY)", "without provider_client_cert"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadTLS(t, tc.env)
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if b, _ := os.ReadFile(key); strings.Contains(err.Error(), string(b[30:60])) {
				t.Fatal("the error quotes the key's contents")
			}
		})
	}
}

// Validate reads the TLS files once: a command that builds its provider
// client after it gets the settings Validate checked, not the files read
// a second time.
func TestProviderTLSIsWhatValidateRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "private provider CA")
	caFile := testpki.Write(t, dir, "ca.pem", ca.PEM)
	c, err := loadTLS(t, map[string]string{"TILECTL_PROVIDER_CA_FILE": caFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(caFile); err != nil {
		t.Fatal(err)
	}
	conf, err := c.ProviderTLS(time.Now())
	if err != nil || conf == nil || conf.RootCAs == nil {
		t.Fatalf("ProviderTLS after Validate, with the file gone since = %v, %v; want what Validate read", conf, err)
	}
}
