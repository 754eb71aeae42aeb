package uploader

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
	"unicode/utf8"
)

// probeAttempts is how many times the run's first request (GET
// /v1/capabilities) is tried when nothing that speaks the API answers:
// with the transport backoff (0.5 s, 1 s) a wrong URL fails in about two
// seconds instead of the minutes a provider that answered before is given.
const probeAttempts = 3

// ErrNoProvider is matched by a *NoProviderError.
var ErrNoProvider = errors.New("no provider API at the provider URL")

// NoProviderError says the run's first contact found no provider API at the
// base URL: nothing answered (connection refused, DNS, TLS), or what
// answered is not the API (an HTML page, not JSON, JSON of another shape).
// It is never retried by a later call of the same run.
type NoProviderError struct {
	URL     string // the base URL, credentials redacted
	Problem string // what was found, for people
	Err     error  // the transport error, when nothing answered
	// FirstContact is the first contact's bound when nothing answered
	// within it (ClientOptions.FirstContactTimeout), 0 otherwise.
	FirstContact time.Duration
}

func (e *NoProviderError) Error() string {
	msg := fmt.Sprintf("no provider API at %s: %s", e.URL, e.Problem)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *NoProviderError) Unwrap() error { return e.Err }

// Is matches ErrNoProvider.
func (e *NoProviderError) Is(target error) bool { return target == ErrNoProvider }

// noAnswer names a transport failure the way an operator looks for it.
func noAnswer(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		return "the host name does not resolve (DNS); check the host in provider_url"
	case errors.As(err, new(x509.UnknownAuthorityError)):
		return "the provider's TLS certificate is signed by an authority this machine does not trust; " +
			"if the provider is behind a private CA, name its PEM bundle with provider_ca_file " +
			"(--provider-ca-file, TILECTL_PROVIDER_CA_FILE)"
	case strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate"):
		return "the provider refused the TLS handshake: it wants a client certificate it accepts; " +
			"set provider_client_cert and provider_client_key (--provider-client-cert, --provider-client-key)"
	case untrustedCertificate(err) || strings.Contains(err.Error(), "tls:"):
		return "the TLS handshake failed; check the scheme (http/https) and the certificate"
	case errors.As(err, &op) && strings.Contains(err.Error(), "connection refused"):
		return "connection refused; check the port and that the provider is running"
	case isTimeout(err):
		return "no answer in time; check the host and any firewall"
	}
	return "no answer; check the URL and that the provider is running"
}

// notTheAPI describes a capabilities answer that is not the API's, or ""
// when the body is a JSON object with at least one capabilities field.
func notTheAPI(status int, contentType string, body []byte) string {
	trimmed := bytes.TrimSpace(body)
	if !json.Valid(trimmed) {
		return fmt.Sprintf("GET /v1/capabilities answered %d with %s, not JSON (starts %q); is this the provider's base URL?",
			status, orUnknown(contentType), snippet(trimmed))
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(trimmed, &fields) != nil {
		return fmt.Sprintf("GET /v1/capabilities answered %d with JSON that is not an object (starts %q)", status, snippet(trimmed))
	}
	if status >= 200 && status < 300 {
		for _, k := range []string{"api_version", "max_batch_tiles", "max_batch_bytes", "max_tile_bytes"} {
			if _, ok := fields[k]; ok {
				return ""
			}
		}
		return fmt.Sprintf("GET /v1/capabilities answered %d with JSON of another shape (no api_version or max_batch_* field)", status)
	}
	return ""
}

func orUnknown(ct string) string {
	if ct == "" {
		return "no Content-Type"
	}
	return ct
}

// snippet is the start of a body, cut on a character boundary.
func snippet(b []byte) string {
	const n = 40
	if len(b) > n {
		b = b[:n]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
	}
	return string(b)
}

// notFound describes a 404 to GET /v1/capabilities at url: the base URL
// has a path under which the API is not routed (often a "/v1" too many,
// since the client adds /v1 itself).
func notFound(url, basePath string) string {
	msg := fmt.Sprintf("GET %s answered 404; is this the provider's base URL?", url)
	if basePath != "" {
		msg += fmt.Sprintf(" It has the path %q; the client adds /v1/... itself, so the base URL is usually the scheme, host and port alone", basePath)
	}
	return msg
}
