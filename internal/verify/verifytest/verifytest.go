// Package verifytest helps tests that sign and verify policy modules: the
// OCI registry of internal/testkit/ociregistry, fresh key pairs, and signature
// artifacts written by hand, byte by byte as cosign lays them out, so that
// tests can also write broken ones. Only tests import it.
package verifytest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/testkit/ociregistry"
	"github.com/wardenhq/warden/internal/verify"
)

// Registry is the registry of internal/testkit/ociregistry, served over
// TLS, with what a test of signatures needs of it.
type Registry struct {
	*ociregistry.Registry
}

// StartRegistry starts a registry that stops with the test.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	return &Registry{ociregistry.Start(t)}
}

// Sources trusts the registry's certificate authority.
func (r *Registry) Sources() *policyfetch.Sources {
	return &policyfetch.Sources{SourceAuthorities: map[string][]*x509.Certificate{r.Host: {r.CA.Cert}}}
}

// Fetcher returns a Fetcher of the registry with an empty store, no Docker
// credentials, and v as its Verifier (nil for none).
func (r *Registry) Fetcher(t testing.TB, v policyfetch.Verifier) *policyfetch.Fetcher {
	t.Helper()
	f, err := policyfetch.New(policyfetch.Options{
		StoreDir:         t.TempDir(),
		Sources:          r.Sources(),
		DockerConfigPath: filepath.Join(t.TempDir(), "no-docker-config.json"),
		Verifier:         v,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// Wasm returns a small module: the Wasm header and a payload.
func Wasm(payload string) []byte {
	return append([]byte("\x00asm\x01\x00\x00\x00"), payload...)
}

// Push publishes a module at ref and returns its manifest digest.
func Push(t testing.TB, f *policyfetch.Fetcher, ref string, module []byte) string {
	t.Helper()
	d, err := f.Push(context.Background(), ref, module, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Key is a fresh key pair.
type Key struct {
	// Signer is the private key.
	Signer crypto.Signer
	// PublicPEM is the public key, "-----BEGIN PUBLIC KEY-----...".
	PublicPEM string
}

// NewKey returns an ECDSA P-256 key pair, the kind cosign generate-key-pair
// makes.
func NewKey(t testing.TB) *Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return newKey(t, k)
}

// NewRSAKey returns an RSA 2048 key pair.
func NewRSAKey(t testing.TB) *Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return newKey(t, k)
}

// NewEd25519Key returns an Ed25519 key pair.
func NewEd25519Key(t testing.TB) *Key {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return newKey(t, k)
}

func newKey(t testing.TB, k crypto.Signer) *Key {
	t.Helper()
	pub, err := cryptoutils.MarshalPublicKeyToPEM(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return &Key{Signer: k, PublicPEM: string(pub)}
}

// Sign signs the module at uri with verify.Sign.
func Sign(t testing.TB, f *policyfetch.Fetcher, uri string, k *Key, annotations map[string]string) verify.Signed {
	t.Helper()
	s, err := verify.Sign(context.Background(), f, uri, k.Signer, verify.SignOptions{Annotations: annotations})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Payload writes the simple-signing payload of cosign by hand, with the
// field names and order of containers/image's format and cosign:
// critical.identity.docker-reference, critical.image.docker-manifest-digest,
// critical.type, then optional.
func Payload(repository, manifestDigest string, annotations map[string]string) []byte {
	optional := []byte("null")
	if len(annotations) > 0 {
		optional, _ = json.Marshal(annotations) // keys sorted, as encoding/json sorts map keys
	}
	return []byte(fmt.Sprintf(`{"critical":{"identity":{"docker-reference":%q},"image":{"docker-manifest-digest":%q},"type":"cosign container image signature"},"optional":%s}`,
		repository, manifestDigest, optional))
}

// SignBytes signs data as cosign does: SHA-256 then ECDSA (ASN.1) or RSA
// PKCS#1 v1.5; Ed25519 signs data itself.
func (k *Key) SignBytes(t testing.TB, data []byte) []byte {
	t.Helper()
	var (
		sig []byte
		err error
	)
	if _, ok := k.Signer.(ed25519.PrivateKey); ok {
		sig, err = k.Signer.Sign(rand.Reader, data, crypto.Hash(0))
	} else {
		sum := sha256.Sum256(data)
		sig, err = k.Signer.Sign(rand.Reader, sum[:], crypto.SHA256)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// Layer is one signature layer of a hand-written signature artifact.
type Layer struct {
	// Payload is the layer's content.
	Payload []byte
	// Signature goes, base64-encoded, into the signature annotation; nil
	// leaves the annotation out.
	Signature []byte
	// Annotations are added to the layer's annotations.
	Annotations map[string]string
	// MediaType defaults to verify.MediaTypeSimpleSigning.
	MediaType string
}

// WriteSignatures writes, by hand, the signature artifact of manifest
// manifestDigest in repo (host/repo), replacing any: an OCI image manifest
// tagged sha256-<hex>.sig whose config is an OCI image config listing the
// layers, and one layer per Layer. It returns the artifact reference.
func WriteSignatures(t testing.TB, f *policyfetch.Fetcher, repo, manifestDigest string, layers ...Layer) string {
	t.Helper()
	ctx := context.Background()
	var (
		descs   []ocispec.Descriptor
		diffIDs []string
		history []string
	)
	for _, l := range layers {
		mt := l.MediaType
		if mt == "" {
			mt = verify.MediaTypeSimpleSigning
		}
		annotations := map[string]string{}
		if l.Signature != nil {
			annotations[verify.AnnotationSignature] = base64.StdEncoding.EncodeToString(l.Signature)
		}
		for k, v := range l.Annotations {
			annotations[k] = v
		}
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(l.Payload), Size: int64(len(l.Payload)), Annotations: annotations}
		if err := f.PushBlob(ctx, repo, d, l.Payload); err != nil {
			t.Fatal(err)
		}
		descs = append(descs, d)
		diffIDs = append(diffIDs, `"`+string(d.Digest)+`"`)
		history = append(history, `{"created":"0001-01-01T00:00:00Z"}`)
	}
	config := []byte(fmt.Sprintf(`{"architecture":"","created":"0001-01-01T00:00:00Z","history":[%s],"os":"","rootfs":{"type":"layers","diff_ids":[%s]},"config":{}}`,
		strings.Join(history, ","), strings.Join(diffIDs, ",")))
	cdesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(config), Size: int64(len(config))}
	if err := f.PushBlob(ctx, repo, cdesc, config); err != nil {
		t.Fatal(err)
	}
	manifest, err := json.Marshal(struct {
		SchemaVersion int                  `json:"schemaVersion"`
		MediaType     string               `json:"mediaType"`
		Config        ocispec.Descriptor   `json:"config"`
		Layers        []ocispec.Descriptor `json:"layers"`
	}{2, ocispec.MediaTypeImageManifest, cdesc, descs})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := verify.SignatureTag(manifestDigest)
	if err != nil {
		t.Fatal(err)
	}
	ref := repo + ":" + tag
	if _, err := f.PushManifest(ctx, ref, ocispec.MediaTypeImageManifest, manifest); err != nil {
		t.Fatal(err)
	}
	return ref
}

// ReadSignatureArtifact returns the manifest and config of the signature
// artifact at ref, and its layers' contents.
func ReadSignatureArtifact(t testing.TB, f *policyfetch.Fetcher, repo, ref string) (manifest ocispec.Manifest, raw, config []byte, layers [][]byte) {
	t.Helper()
	ctx := context.Background()
	m, err := f.FetchManifest(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m.Bytes, &manifest); err != nil {
		t.Fatal(err)
	}
	if config, err = f.FetchBlob(ctx, repo, manifest.Config); err != nil {
		t.Fatal(err)
	}
	for _, l := range manifest.Layers {
		b, err := f.FetchBlob(ctx, repo, l)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, b)
	}
	return manifest, m.Bytes, config, layers
}

// CodeSigner is a code-signing certificate issued by a throwaway
// certificate authority, and its key.
type CodeSigner struct {
	// Key is the certificate's key pair.
	Key *Key
	// Cert and CertPEM are the certificate.
	Cert    *x509.Certificate
	CertPEM []byte
	// CAPEM is the issuing authority's certificate.
	CAPEM []byte
}

// NewCodeSigner issues an ECDSA P-256 code-signing certificate, valid from
// an hour ago for a day, from a fresh certificate authority; edits change
// the certificate's template before it is signed.
func NewCodeSigner(t testing.TB, edits ...func(*x509.Certificate)) *CodeSigner {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "code signing ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key := NewKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:   big.NewInt(time.Now().UnixNano() + 1),
		Subject:        pkix.Name{CommonName: "policy signer"},
		EmailAddresses: []string{"signer@example.com"},
		NotBefore:      time.Now().Add(-time.Hour),
		NotAfter:       time.Now().Add(24 * time.Hour),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}
	for _, e := range edits {
		e(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Signer.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CodeSigner{
		Key:     key,
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}
}
