// Package pki is Warden's own certificate authority: the CA the controller
// keeps in a Secret, and the certificates it issues with it (the policy
// servers' serving and cache-signing certificates, the controller's webhook
// certificate), and the parsing of PEM certificates the rest of Warden
// shares. Keys are ECDSA P-256, as Kubewarden's are; everything is
// PEM-encoded.
//
// It holds no state and imports nothing from Warden. Every function is safe
// for concurrent use.
package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Validity periods of what the controller issues, as Kubewarden's.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 365 * 24 * time.Hour
)

// CA is a certificate authority: its certificate and key, parsed and as PEM.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed CA named commonName, valid from now for
// validity.
func NewCA(commonName string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	sn, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew between nodes
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return ParseCA(encode("CERTIFICATE", der), keyPEM)
}

// ParseCA reads a CA from its PEM certificate and key, and checks that they
// belong together and that the certificate is a CA's.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate is not a CA certificate")
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the CA key does not match its certificate")
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Pair is a certificate and its key, PEM-encoded.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// IssueServer issues a serving certificate for the DNS names and IP
// addresses, valid from now for validity (never past the CA's own expiry).
// The first DNS name, or else the first address, is its common name.
func (ca *CA) IssueServer(dnsNames []string, ips []net.IP, now time.Time, validity time.Duration) (Pair, error) {
	cn := ""
	switch {
	case len(dnsNames) > 0:
		cn = dnsNames[0]
	case len(ips) > 0:
		cn = ips[0].String()
	default:
		return Pair{}, errors.New("a serving certificate needs a DNS name or an IP address")
	}
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, now, validity)
}

// IssueClient issues a client certificate for commonName.
func (ca *CA) IssueClient(commonName string, now time.Time, validity time.Duration) (Pair, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, now, validity)
}

// IssueCodeSigning issues a certificate for commonName whose only use is
// code signing: a policy server signs the compiled modules it shares with
// it, and its replicas accept only blobs signed by such a certificate.
func (ca *CA) IssueCodeSigning(commonName string, now time.Time, validity time.Duration) (Pair, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}, now, validity)
}

func (ca *CA) issue(tmpl *x509.Certificate, now time.Time, validity time.Duration) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generating a key: %w", err)
	}
	if tmpl.SerialNumber, err = serialNumber(); err != nil {
		return Pair{}, err
	}
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Pair{}, fmt.Errorf("signing the certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: encode("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// ParseKey parses a PEM ECDSA private key, as the CA writes them.
func ParseKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing an EC private key: %w", err)
	}
	return key, nil
}

// ParseCertificate parses the first certificate of a PEM text.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate: %w", err)
	}
	return cert, nil
}

// ParseCertificates parses every CERTIFICATE block of a PEM text, skipping
// other blocks and text around them; it fails when there is none.
func ParseCertificates(pemData []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := pemData; ; {
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
			return nil, fmt.Errorf("not a valid certificate: %w", err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return certs, nil
}

// NeedsRenewal reports whether a certificate expires within margin of now
// (or is not yet valid).
func NeedsRenewal(cert *x509.Certificate, now time.Time, margin time.Duration) bool {
	return now.Before(cert.NotBefore) || !now.Add(margin).Before(cert.NotAfter)
}

// IssuedBy reports whether the PEM certificate is valid at now, signed by
// ca, and covers dnsName (when not empty).
func IssuedBy(certPEM []byte, ca *CA, dnsName string, now time.Time) bool {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return false
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	_, err = cert.Verify(x509.VerifyOptions{
		DNSName:     dnsName,
		Roots:       pool,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	return err == nil
}

// Bundle joins PEM certificates into one bundle, skipping empty ones.
func Bundle(certs ...[]byte) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		if len(c) == 0 {
			continue
		}
		b.Write(bytes.TrimSpace(c))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func serialNumber() (*big.Int, error) {
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return sn, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a key: %w", err)
	}
	return encode("EC PRIVATE KEY", der), nil
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
