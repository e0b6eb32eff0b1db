package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// readCert reads the PEM certificate of path.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode(doc)
	if block == nil || block.Type != "CERTIFICATE" || len(strings.TrimSpace(string(rest))) > 0 {
		t.Fatalf("%s is not one PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestWriteTLS(t *testing.T) {
	now := time.Now()
	files := layout{TLS: filepath.Join(t.TempDir(), "build", "tls")}.tlsFiles()
	if err := writeTLS(files, certHosts("192.0.2.10"), now); err != nil {
		t.Fatal(err)
	}

	ca, leaf := readCert(t, files.CA), readCert(t, files.Cert)
	if !ca.IsCA || leaf.IsCA {
		t.Errorf("CA IsCA %v, serving certificate IsCA %v; want true, false", ca.IsCA, leaf.IsCA)
	}
	for _, c := range []*x509.Certificate{ca, leaf} {
		key, ok := c.PublicKey.(*ecdsa.PublicKey)
		if !ok || key.Curve != elliptic.P256() {
			t.Errorf("%s: public key %T, want ECDSA P-256", c.Subject.CommonName, c.PublicKey)
		}
		if !c.NotBefore.Before(now) || !c.NotAfter.After(now.Add(7*24*time.Hour)) {
			t.Errorf("%s: valid from %v to %v, want from before now for more than a week", c.Subject.CommonName, c.NotBefore, c.NotAfter)
		}
	}
	if ca.SerialNumber.Cmp(leaf.SerialNumber) == 0 || ca.SerialNumber.Sign() <= 0 {
		t.Errorf("serial numbers %v and %v, want distinct positive ones", ca.SerialNumber, leaf.SerialNumber)
	}
	if _, err := tls.LoadX509KeyPair(files.Cert, files.Key); err != nil {
		t.Errorf("the serving certificate and key do not load as a pair: %v", err)
	}
	if info, err := os.Stat(files.Key); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v; want mode 0600", info.Mode(), err)
	}
	if extra, _ := filepath.Glob(filepath.Join(filepath.Dir(files.CA), ".*")); len(extra) > 0 {
		t.Errorf("temporary files left behind: %v", extra)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	tests := []struct {
		host   string
		wantOK bool
	}{
		{host: "localhost", wantOK: true},
		{host: "127.0.0.1", wantOK: true},
		{host: "::1", wantOK: true},
		{host: "192.0.2.10", wantOK: true}, // the bind address
		{host: "example.com"},
		{host: "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			_, err := leaf.Verify(x509.VerifyOptions{
				DNSName:     tt.host,
				Roots:       roots,
				CurrentTime: now,
				KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if (err == nil) != tt.wantOK {
				t.Errorf("verifying for %s: %v, want success %v", tt.host, err, tt.wantOK)
			}
		})
	}

	t.Run("another run writes another CA", func(t *testing.T) {
		if err := writeTLS(files, certHosts(defaultAddr), now); err != nil {
			t.Fatal(err)
		}
		if again := readCert(t, files.CA); again.Equal(ca) {
			t.Error("the second run kept the CA")
		}
	})
}

func TestCertHosts(t *testing.T) {
	loopback := []string{"localhost", "127.0.0.1", "::1"}
	tests := []struct {
		addr string
		want []string
	}{
		{addr: "127.0.0.1", want: loopback},
		{addr: "0.0.0.0", want: loopback},
		{addr: "::", want: loopback},
		{addr: "", want: loopback},
		{addr: "localhost", want: loopback},
		{addr: "::1", want: loopback},
		{addr: "my-host.example", want: append(slices.Clone(loopback), "my-host.example")},
		{addr: "192.0.2.10", want: append(slices.Clone(loopback), "192.0.2.10")},
		{addr: "2001:db8::1", want: append(slices.Clone(loopback), "2001:db8::1")},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := certHosts(tt.addr); !slices.Equal(got, tt.want) {
				t.Errorf("certHosts(%q) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}
