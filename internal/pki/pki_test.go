package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("warden-test-ca", now, CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestServerCertificateWorksForTLS(t *testing.T) {
	ca := newCA(t)
	pair, err := ca.IssueServer([]string{"policy-server-default.warden.svc"}, []net.IP{net.ParseIP("127.0.0.1")}, now, ServerValidity)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM); err != nil {
		t.Fatalf("the pair is not a TLS key pair: %v", err)
	}
	cert, err := ParseCertificate(pair.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, name := range []string{"policy-server-default.warden.svc", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: now}); err != nil {
			t.Errorf("verifying for %s: %v", name, err)
		}
	}
	if got, want := cert.NotAfter, now.Add(ServerValidity); !got.Equal(want) {
		t.Errorf("NotAfter = %v, want %v", got, want)
	}
	if !IssuedBy(pair.CertPEM, ca, "policy-server-default.warden.svc", now) {
		t.Error("IssuedBy = false for the issuing CA")
	}
	if IssuedBy(pair.CertPEM, newCA(t), "", now) {
		t.Error("IssuedBy = true for another CA")
	}
	if IssuedBy(pair.CertPEM, ca, "other.warden.svc", now) {
		t.Error("IssuedBy = true for a name the certificate does not cover")
	}
}

func TestCertificatesNeverOutliveTheirCA(t *testing.T) {
	ca, err := NewCA("short", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.IssueClient("audit-scanner-client", now, ServerValidity)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ParseCertificate(pair.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("NotAfter = %v, want the CA's %v", cert.NotAfter, ca.Cert.NotAfter)
	}
}

func TestParseCARejectsBadInput(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	leaf, err := ca.IssueServer([]string{"x"}, nil, now, ServerValidity)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		cert, key     []byte
		wantErrSubstr string
	}{
		{"key of another CA", ca.CertPEM, other.KeyPEM, "does not match"},
		{"not a CA certificate", leaf.CertPEM, leaf.KeyPEM, "not a CA"},
		{"garbage certificate", []byte("nope"), ca.KeyPEM, "no PEM certificate"},
		{"garbage key", ca.CertPEM, []byte("nope"), "not PEM"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCA(tc.cert, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstr) {
				t.Fatalf("ParseCA: %v, want an error containing %q", err, tc.wantErrSubstr)
			}
		})
	}
	if _, err := ParseCA(ca.CertPEM, ca.KeyPEM); err != nil {
		t.Fatalf("ParseCA of a good CA: %v", err)
	}
}

func TestNeedsRenewal(t *testing.T) {
	ca := newCA(t)
	tests := []struct {
		at   time.Time
		want bool
	}{
		{now, false},
		{ca.Cert.NotAfter.Add(-61 * 24 * time.Hour), false},
		{ca.Cert.NotAfter.Add(-59 * 24 * time.Hour), true},
		{ca.Cert.NotAfter.Add(time.Hour), true},
		{ca.Cert.NotBefore.Add(-time.Minute), true},
	}
	for _, tc := range tests {
		if got := NeedsRenewal(ca.Cert, tc.at, 60*24*time.Hour); got != tc.want {
			t.Errorf("NeedsRenewal at %v = %v, want %v", tc.at, got, tc.want)
		}
	}
}

func TestBundle(t *testing.T) {
	a, b := newCA(t), newCA(t)
	bundle := Bundle(a.CertPEM, nil, b.CertPEM)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("the bundle does not parse")
	}
	for _, ca := range []*CA{a, b} {
		pair, err := ca.IssueServer([]string{"x"}, nil, now, ServerValidity)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := ParseCertificate(pair.CertPEM)
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: "x", Roots: pool, CurrentTime: now}); err != nil {
			t.Errorf("a certificate of %s does not verify against the bundle: %v", ca.Cert.Subject, err)
		}
	}
}

func TestParseCertificates(t *testing.T) {
	a, b := newCA(t), newCA(t)
	withKey := Bundle(a.CertPEM, a.KeyPEM, b.CertPEM)
	certs, err := ParseCertificates(append([]byte("leading text\n"), withKey...))
	if err != nil || len(certs) != 2 || !certs[0].Equal(a.Cert) || !certs[1].Equal(b.Cert) {
		t.Fatalf("ParseCertificates = %d certificates, %v; want the two CAs, skipping the key", len(certs), err)
	}
	bad := []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	for input, want := range map[string]string{string(a.KeyPEM): "no PEM CERTIFICATE block", "": "no PEM CERTIFICATE block", string(bad): "not a valid certificate"} {
		if _, err := ParseCertificates([]byte(input)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCertificates(%.20q) = %v, want an error containing %q", input, err, want)
		}
	}
}
