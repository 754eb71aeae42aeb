package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// ProviderTLS builds the TLS settings for the provider from
// provider_ca_file (added to the system roots, which it does not replace)
// and provider_client_cert / provider_client_key (presented when the
// provider asks for a client certificate). It returns nil, nil when none
// is set. Each error is a *FieldError naming the option, the file and
// where the value came from: a file that cannot be read, holds no PEM
// certificate (or key), a key that does not match its certificate, a
// certificate outside its validity period at now, or only one of the
// client certificate and key set. Validate calls it, so a command fails
// at start, before anything is sent, and keeps what it built: a later
// call for the same files returns a copy of that instead of reading them
// again.
func (c *Config) ProviderTLS(now time.Time) (*tls.Config, error) {
	if c.ProviderCAFile == "" && c.ProviderClientCert == "" && c.ProviderClientKey == "" {
		return nil, nil
	}
	files := [3]string{c.ProviderCAFile, c.ProviderClientCert, c.ProviderClientKey}
	if c.tls != nil && c.tls.files == files {
		return c.tls.conf.Clone(), nil
	}
	conf, err := c.buildTLS(now)
	if err != nil {
		return nil, err
	}
	c.tls = &builtTLS{files: files, conf: conf}
	return conf.Clone(), nil
}

// builtTLS is the TLS settings ProviderTLS built and the files it read.
type builtTLS struct {
	files [3]string // provider_ca_file, provider_client_cert, provider_client_key
	conf  *tls.Config
}

func (c *Config) buildTLS(now time.Time) (*tls.Config, error) {
	var errs []error
	bad := func(key, file, allowed string) {
		errs = append(errs, &FieldError{Key: key, Value: fmt.Sprintf("%q", file), Allowed: allowed, Source: c.sources[key]})
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if f := c.ProviderCAFile; f != "" {
		if pool, problem := caPool(f, now); problem != "" {
			bad("provider_ca_file", f, problem)
		} else {
			conf.RootCAs = pool
		}
	}
	certFile, keyFile := c.ProviderClientCert, c.ProviderClientKey
	switch {
	case certFile == "" && keyFile != "":
		bad("provider_client_key", keyFile, "is set without provider_client_cert: set both (the certificate and its key) or neither")
	case certFile != "" && keyFile == "":
		bad("provider_client_cert", certFile, "is set without provider_client_key: set both (the certificate and its key) or neither")
	case certFile != "":
		cert, key, ok := readPEMFile(certFile, "CERTIFICATE", "provider_client_cert", bad), []byte(nil), false
		if k := readPEMFile(keyFile, "PRIVATE KEY", "provider_client_key", bad); k != nil {
			key, ok = k, cert != nil
		}
		if !ok {
			break
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			bad("provider_client_key", keyFile, fmt.Sprintf("must be the private key of the certificate in %s (provider_client_cert, from %s): %v",
				certFile, c.Source("provider_client_cert"), err))
			break
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			bad("provider_client_cert", certFile, "must hold an X.509 certificate: "+err.Error())
			break
		}
		if problem := validity(leaf, now); problem != "" {
			bad("provider_client_cert", certFile, problem)
			break
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return conf, nil
}

// caPool is the system roots plus every certificate of the PEM bundle
// file, or what is wrong with the file.
func caPool(file string, now time.Time) (*x509.CertPool, string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "must be a readable PEM bundle of CA certificates: " + err.Error()
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Sprintf("must hold PEM CA certificates: certificate %d does not parse: %v", n+1, err)
		}
		if problem := validity(cert, now); problem != "" {
			return nil, fmt.Sprintf("certificate %d (%s): %s", n+1, cert.Subject, problem)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, "must be a PEM bundle of CA certificates (-----BEGIN CERTIFICATE-----); the file holds none"
	}
	return pool, ""
}

// readPEMFile reads file and checks that it holds a PEM block whose type
// ends in want ("CERTIFICATE", "PRIVATE KEY": RSA, EC and PKCS#8 keys),
// reporting what is wrong through bad; nil when it does not.
func readPEMFile(file, want, key string, bad func(key, file, allowed string)) []byte {
	b, err := os.ReadFile(file)
	if err != nil {
		bad(key, file, "must be a readable PEM file: "+err.Error())
		return nil
	}
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if strings.HasSuffix(block.Type, want) {
			return b
		}
	}
	bad(key, file, fmt.Sprintf("must be a PEM file holding a %s (-----BEGIN ...%s-----); the file holds none", strings.ToLower(want), want))
	return nil
}

// validity says what is wrong with cert's validity period at now, or "".
func validity(cert *x509.Certificate, now time.Time) string {
	switch {
	case now.After(cert.NotAfter):
		return fmt.Sprintf("the certificate expired on %s", cert.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(cert.NotBefore):
		return fmt.Sprintf("the certificate is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return ""
}
