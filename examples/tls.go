package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// tlsFiles are the PEM files of the runner's throwaway PKI.
type tlsFiles struct {
	// CA is the certificate of the CA that signed Cert: what clients trust.
	CA string
	// Cert and Key are the serving certificate and its private key.
	Cert, Key string
}

// tlsFiles returns the files of the layout's TLS directory.
func (l layout) tlsFiles() tlsFiles {
	return tlsFiles{
		CA:   filepath.Join(l.TLS, "ca.pem"),
		Cert: filepath.Join(l.TLS, "tls.crt"),
		Key:  filepath.Join(l.TLS, "tls.key"),
	}
}

// certHosts are the names the serving certificate is for: the loopback
// names, and addr, the address the server binds, unless it is unspecified
// (every interface) or one of them.
func certHosts(addr string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	ip := net.ParseIP(addr)
	switch {
	case addr == "" || ip != nil && ip.IsUnspecified():
	case ip != nil:
		if !slices.Contains(hosts, ip.String()) {
			hosts = append(hosts, ip.String())
		}
	case !slices.Contains(hosts, addr):
		hosts = append(hosts, addr)
	}
	return hosts
}

// certValidity is how long the throwaway certificates are valid from now.
const certValidity = 30 * 24 * time.Hour

// writeTLS creates a CA and a serving certificate for hosts (DNS names or IP
// addresses), both with ECDSA P-256 keys and valid from an hour before now
// for certValidity, and writes the CA certificate, the serving certificate
// and its key (mode 0600) to files, creating their directories. The CA key
// is thrown away: nothing else can be signed with it.
func writeTLS(files tlsFiles, hosts []string, now time.Time) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating the CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "Warden examples CA", Organization: []string{"Warden examples"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("creating the CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("parsing the CA certificate: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating the serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: "warden-policy-server", Organization: []string{"Warden examples"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("creating the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding the serving key: %w", err)
	}

	for _, f := range []struct {
		path, blockType string
		der             []byte
		perm            os.FileMode
	}{
		{files.CA, "CERTIFICATE", caDER, 0o644},
		{files.Key, "PRIVATE KEY", keyDER, 0o600},
		{files.Cert, "CERTIFICATE", der, 0o644},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return fmt.Errorf("creating the TLS directory: %w", err)
		}
		err := writeAtomic(f.path, f.perm, func(w io.Writer) error {
			return pem.Encode(w, &pem.Block{Type: f.blockType, Bytes: f.der})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// randomSerial returns a random positive 127-bit certificate serial number.
func randomSerial() *big.Int {
	var b [16]byte
	rand.Read(b[:]) // never fails: it crashes the program instead
	b[0] = b[0]&0x7f | 0x40
	return new(big.Int).SetBytes(b[:])
}
