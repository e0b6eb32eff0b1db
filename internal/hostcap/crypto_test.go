package hostcap

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// testCert is a certificate made for a test, and its key.
type testCert struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serialNumber int64

// issue makes a certificate valid from notBefore to notAfter, signed by
// parent (nil: self-signed); ca makes it a certificate authority.
func issue(t *testing.T, name string, parent *testCert, ca bool, notBefore, notAfter time.Time) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serialNumber++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serialNumber),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage, tmpl.ExtKeyUsage = x509.KeyUsageCertSign|x509.KeyUsageCRLSign, nil
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCert{cert: cert, key: key}
}

func (c *testCert) pem() Certificate {
	return Certificate{Encoding: "Pem", Data: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})}
}

func (c *testCert) der() Certificate { return Certificate{Encoding: "Der", Data: c.cert.Raw} }

func chain(certs ...*testCert) []Certificate {
	out := []Certificate{}
	for _, c := range certs {
		out = append(out, c.pem())
	}
	return out
}

// TestIsCertificateTrusted checks crypto/v1/is_certificate_trusted against
// certificates made here, with Kubewarden's reasons.
func TestIsCertificateTrusted(t *testing.T) {
	now := time.Now()
	day := 24 * time.Hour
	year := 365 * day
	root := issue(t, "root.example", nil, true, now.Add(-2*year), now.Add(2*year))
	inter := issue(t, "intermediate.example", root, true, now.Add(-year), now.Add(2*year))
	leaf := issue(t, "leaf.example", inter, false, now.Add(-10*day), now.Add(10*day))
	direct := issue(t, "direct.example", root, false, now.Add(-10*day), now.Add(10*day))
	expired := issue(t, "expired.example", inter, false, now.Add(-year), now.Add(-10*day))
	future := issue(t, "future.example", inter, false, now.Add(10*day), now.Add(year))
	expiredInter := issue(t, "old-intermediate.example", root, true, now.Add(-year), now.Add(-10*day))
	underExpiredInter := issue(t, "orphan.example", expiredInter, false, now.Add(-day), now.Add(year))
	expiredRoot := issue(t, "old-root.example", nil, true, now.Add(-year), now.Add(-10*day))
	underExpiredRoot := issue(t, "still.example", expiredRoot, false, now.Add(-day), now.Add(year))
	otherRoot := issue(t, "other-root.example", nil, true, now.Add(-year), now.Add(year))
	selfSigned := issue(t, "self.example", nil, false, now.Add(-day), now.Add(day))

	rootPool := x509.NewCertPool()
	rootPool.AddCert(root.cert)
	str := func(s string) *string { return &s }
	tests := []struct {
		name    string
		req     CertificateVerificationRequest
		roots   *x509.CertPool
		want    certificateVerificationResponse
		wantErr string
	}{
		{name: "leaf, intermediate and root", req: CertificateVerificationRequest{Cert: leaf.pem(), CertChain: chain(inter, root)},
			want: certificateVerificationResponse{Trusted: true}},
		{name: "leaf and root", req: CertificateVerificationRequest{Cert: direct.pem(), CertChain: chain(root)},
			want: certificateVerificationResponse{Trusted: true}},
		{name: "DER", req: CertificateVerificationRequest{Cert: leaf.der(), CertChain: []Certificate{inter.der(), root.der()}},
			want: certificateVerificationResponse{Trusted: true}},
		{name: "expired", req: CertificateVerificationRequest{Cert: expired.pem(), CertChain: chain(inter, root)},
			want: untrusted("Certificate is being used after its expiration date")},
		{name: "not yet valid", req: CertificateVerificationRequest{Cert: future.pem(), CertChain: chain(inter, root)},
			want: untrusted("Certificate is being used before its validity date")},
		{name: "expired, whatever the chain", req: CertificateVerificationRequest{Cert: expired.pem(), CertChain: chain(otherRoot)},
			want: untrusted("Certificate is being used after its expiration date")},
		{name: "valid at not_after", req: CertificateVerificationRequest{Cert: expired.pem(), CertChain: chain(inter, root),
			NotAfter: str(now.Add(-20 * day).Format(time.RFC3339))},
			want: certificateVerificationResponse{Trusted: true}},
		{name: "not yet valid at not_after", req: CertificateVerificationRequest{Cert: leaf.pem(), CertChain: chain(inter, root),
			NotAfter: str(now.Add(-20 * day).Format(time.RFC3339))},
			want: untrusted("Certificate is being used before its validity date")},
		{name: "expired intermediate", req: CertificateVerificationRequest{Cert: underExpiredInter.pem(), CertChain: chain(expiredInter, root)},
			want: untrusted("Certificate is being used after its expiration date")},
		{name: "expired root: not checked, as in webpki", req: CertificateVerificationRequest{Cert: underExpiredRoot.pem(), CertChain: chain(expiredRoot)},
			want: certificateVerificationResponse{Trusted: true}},
		{name: "another chain", req: CertificateVerificationRequest{Cert: leaf.pem(), CertChain: chain(otherRoot)},
			want: untrusted("Certificate is not trusted by the provided cert chain")},
		{name: "missing intermediate", req: CertificateVerificationRequest{Cert: leaf.pem(), CertChain: chain(root)},
			want: untrusted("Certificate is not trusted by the provided cert chain")},
		{name: "empty chain", req: CertificateVerificationRequest{Cert: leaf.pem(), CertChain: []Certificate{}},
			want: untrusted("Certificate is not trusted by the provided cert chain")},
		{name: "self-signed, its own root", req: CertificateVerificationRequest{Cert: selfSigned.pem(), CertChain: chain(selfSigned)},
			want: certificateVerificationResponse{Trusted: true}},
		{name: "no chain: the roots", req: CertificateVerificationRequest{Cert: leaf.pem()}, roots: rootPool,
			want: untrusted("Certificate is not trusted by the provided cert chain")},
		{name: "no chain: signed by a root", req: CertificateVerificationRequest{Cert: direct.pem()}, roots: rootPool,
			want: certificateVerificationResponse{Trusted: true}},
		{name: "no chain: unknown to the roots", req: CertificateVerificationRequest{Cert: selfSigned.pem()}, roots: rootPool,
			want: untrusted("Certificate is not trusted by the provided cert chain")},
		{name: "malformed not_after", req: CertificateVerificationRequest{Cert: leaf.pem(), CertChain: chain(inter, root), NotAfter: str("yesterday")},
			wantErr: "Timestamp not_after is not in RFC3339 format"},
		{name: "not PEM", req: CertificateVerificationRequest{Cert: Certificate{Encoding: "Pem", Data: Bytes("hello")}},
			wantErr: "Certificate PEM data is not valid: no CERTIFICATE block found"},
		{name: "not DER", req: CertificateVerificationRequest{Cert: Certificate{Encoding: "Der", Data: Bytes("hello")}},
			wantErr: "Certificate is not a valid end-entity certificate: "},
		{name: "unknown encoding", req: CertificateVerificationRequest{Cert: Certificate{Encoding: "PEM", Data: leaf.pem().Data}},
			wantErr: "unknown variant `PEM`, expected `Der` or `Pem`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verifyCertificate(tt.req, tt.roots, now)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestIsCertificateTrustedHostCall sends the payload Kubewarden's Go SDK
// writes (data as numbers, an empty not_after) through a Host.
func TestIsCertificateTrustedHostCall(t *testing.T) {
	now := time.Now()
	root := issue(t, "root.example", nil, true, now.Add(-time.Hour), now.Add(time.Hour))
	leaf := issue(t, "leaf.example", root, false, now.Add(-time.Hour), now.Add(time.Hour))
	payload, err := json.Marshal(map[string]any{
		"cert":       leaf.pem(),
		"cert_chain": []Certificate{root.pem()},
		"not_after":  "",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(payload), `"data":[45,45,45,45,45,66,69,71,73,78`) {
		t.Fatalf("certificate data not written as numbers: %.80s", payload)
	}
	out, err := NewHost(NewDirect(Options{})).HostCall(context.Background(), "crypto", "v1/is_certificate_trusted", payload)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"trusted":true,"reason":""}` {
		t.Fatalf("answer %s", out)
	}
}
