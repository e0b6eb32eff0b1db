package hostcap

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// The reasons crypto/v1/is_certificate_trusted gives, Kubewarden's.
const (
	reasonExpired     = "Certificate is being used after its expiration date"
	reasonNotYetValid = "Certificate is being used before its validity date"
	reasonNotTrusted  = "Certificate is not trusted by the provided cert chain"
)

// maxChainDepth bounds the certificates between a certificate and its root.
const maxChainDepth = 8

// certificateVerificationResponse is the answer of
// crypto/v1/is_certificate_trusted.
type certificateVerificationResponse struct {
	Trusted bool   `json:"trusted"`
	Reason  string `json:"reason"`
}

func untrusted(reason string) certificateVerificationResponse {
	return certificateVerificationResponse{Trusted: false, Reason: reason}
}

// verifyCertificate checks a certificate as Kubewarden does (webpki): its
// validity at not_after (else now), then a path to the last certificate of
// the chain, the root, through the others, the intermediates, each valid at
// that time; without a chain, a path to roots (nil: the system's). Like
// webpki, the root's own validity period is not checked, and any extended
// key usage is accepted. Certificates that cannot be read are errors; a
// certificate that is not trusted is an answer with the reason.
func verifyCertificate(req CertificateVerificationRequest, roots *x509.CertPool, now time.Time) (certificateVerificationResponse, error) {
	leaf, err := parseCertificate(req.Cert)
	if err != nil {
		return certificateVerificationResponse{}, err
	}
	at := now.Truncate(time.Second)
	if req.NotAfter != nil {
		t, err := time.Parse(time.RFC3339, *req.NotAfter)
		if err != nil {
			//lint:ignore ST1005 Kubewarden's wording, which users and policies see
			return certificateVerificationResponse{}, errors.New("Timestamp not_after is not in RFC3339 format")
		}
		at = t.Truncate(time.Second)
	}
	if reason := validity(leaf, at); reason != "" {
		return untrusted(reason), nil
	}
	if req.CertChain == nil {
		return verifyWithRoots(leaf, roots, at), nil
	}
	chain := make([]*x509.Certificate, 0, len(req.CertChain))
	for _, c := range req.CertChain {
		cert, err := parseCertificate(c)
		if err != nil {
			return certificateVerificationResponse{}, err
		}
		chain = append(chain, cert)
	}
	if len(chain) == 0 {
		return untrusted(reasonNotTrusted), nil
	}
	return verifyWithChain(leaf, chain[:len(chain)-1], chain[len(chain)-1], at), nil
}

// parseCertificate reads a PEM (the first CERTIFICATE block) or DER
// certificate.
func parseCertificate(c Certificate) (*x509.Certificate, error) {
	der := []byte(c.Data)
	switch c.Encoding {
	case "Pem":
		rest := der
		der = nil
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				return nil, errors.New("Certificate PEM data is not valid: no CERTIFICATE block found")
			}
			if block.Type == "CERTIFICATE" {
				der = block.Bytes
				break
			}
		}
	case "Der":
	default:
		return nil, fmt.Errorf("unknown variant `%s`, expected `Der` or `Pem`", c.Encoding)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("Certificate is not a valid end-entity certificate: %w", err)
	}
	return cert, nil
}

// validity returns why a certificate is not valid at t, or "".
func validity(c *x509.Certificate, t time.Time) string {
	switch {
	case t.Before(c.NotBefore):
		return reasonNotYetValid
	case t.After(c.NotAfter):
		return reasonExpired
	}
	return ""
}

// verifyWithChain looks for a path from leaf to root through intermediates.
// A candidate issuer is one whose subject is the certificate's issuer and
// whose key verifies its signature; an intermediate must also be a CA valid
// at t. When no path exists, the reason is the validity problem of a
// candidate intermediate if there was one, else that the chain does not
// trust the certificate.
func verifyWithChain(leaf *x509.Certificate, intermediates []*x509.Certificate, root *x509.Certificate, t time.Time) certificateVerificationResponse {
	used := make([]bool, len(intermediates))
	cur := leaf
	for range maxChainDepth {
		if bytes.Equal(cur.RawIssuer, root.RawSubject) &&
			root.CheckSignature(cur.SignatureAlgorithm, cur.RawTBSCertificate, cur.Signature) == nil {
			return certificateVerificationResponse{Trusted: true}
		}
		next, reason := -1, ""
		for i, c := range intermediates {
			if used[i] || !bytes.Equal(cur.RawIssuer, c.RawSubject) || cur.CheckSignatureFrom(c) != nil {
				continue
			}
			if r := validity(c, t); r != "" {
				reason = r
				continue
			}
			next = i
			break
		}
		if next < 0 {
			if reason != "" {
				return untrusted(reason)
			}
			return untrusted(reasonNotTrusted)
		}
		used[next], cur = true, intermediates[next]
	}
	return untrusted("Certificate not trusted: the chain is longer than " + fmt.Sprint(maxChainDepth) + " certificates")
}

// verifyWithRoots checks leaf against roots (nil: the system's).
func verifyWithRoots(leaf *x509.Certificate, roots *x509.CertPool, t time.Time) certificateVerificationResponse {
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: t,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case err == nil:
		return certificateVerificationResponse{Trusted: true}
	case errors.As(err, &unknown):
		return untrusted(reasonNotTrusted)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return untrusted(reasonExpired)
	}
	return untrusted("Certificate not trusted: " + err.Error())
}
