package uploader

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
)

// The standard proxy variables keep working with TLS settings: the
// default client's transport keeps net/http's ProxyFromEnvironment.
func TestTheDefaultClientKeepsTheProxyFromTheEnvironmentWithTLSSettings(t *testing.T) {
	t.Parallel()
	conf := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	for _, insecure := range []bool{false, true} {
		tr, ok := buildClient(nil, nil, nil, conf, insecure, 0).Transport.(*http.Transport)
		if !ok || tr.Proxy == nil {
			t.Fatalf("insecure=%v: transport %T has no Proxy function", insecure, tr)
		}
		if tr.TLSClientConfig == nil || tr.TLSClientConfig.RootCAs != conf.RootCAs || tr.TLSClientConfig.InsecureSkipVerify != insecure {
			t.Fatalf("insecure=%v: TLS settings %+v, want the configured roots", insecure, tr.TLSClientConfig)
		}
	}
	if conf.InsecureSkipVerify {
		t.Fatal("buildClient changed the caller's TLS settings")
	}
}
