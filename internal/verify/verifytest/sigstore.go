package verifytest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	prototrustroot "github.com/sigstore/protobuf-specs/gen/pb-go/trustroot/v1"
	sigstoreca "github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/verify"
)

// Sigstore is a private Sigstore made by the test: a Fulcio-like
// certificate authority (a root and an intermediate) that issues
// short-lived signing certificates naming an OIDC issuer and subject, and
// a Rekor transparency log (sigstore-go's virtual one) that signs entries
// and inclusion proofs. Nothing reaches Sigstore's public instances.
type Sigstore struct {
	// Root and Intermediate are the certificate authority.
	Root, Intermediate *x509.Certificate
	intermediateKey    *ecdsa.PrivateKey
	rekor              *sigstoreca.VirtualSigstore
}

// NewSigstore makes a Sigstore whose authority and log are valid from an
// hour ago for a day.
func NewSigstore(t testing.TB) *Sigstore {
	t.Helper()
	rootKey, root := newCA(t, "test fulcio root", nil, nil)
	interKey, inter := newCA(t, "test fulcio intermediate", root, rootKey)
	rekor, err := sigstoreca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	return &Sigstore{Root: root, Intermediate: inter, intermediateKey: interKey, rekor: rekor}
}

// OtherAuthority returns a Sigstore with a fresh certificate authority
// and the same Rekor log as s: its certificates are logged where s's are,
// but a trust root of s does not trust them.
func (s *Sigstore) OtherAuthority(t testing.TB) *Sigstore {
	t.Helper()
	rootKey, root := newCA(t, "other fulcio root", nil, nil)
	interKey, inter := newCA(t, "other fulcio intermediate", root, rootKey)
	return &Sigstore{Root: root, Intermediate: inter, intermediateKey: interKey, rekor: s.rekor}
}

func newCA(t testing.TB, name string, parent *x509.Certificate, parentKey crypto.Signer) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"warden tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// TrustConfig returns the ClientTrustConfig (JSON) that trusts s: its
// certificate authority and its Rekor log.
func (s *Sigstore) TrustConfig(t testing.TB) []byte {
	t.Helper()
	start := timestamppb.New(time.Now().Add(-time.Hour))
	var logs []*prototrustroot.TransparencyLogInstance
	for id, l := range s.rekor.RekorLogs() {
		der, err := x509.MarshalPKIXPublicKey(l.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		keyID, err := hex.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &prototrustroot.TransparencyLogInstance{
			BaseUrl:       l.BaseURL,
			HashAlgorithm: protocommon.HashAlgorithm_SHA2_256,
			PublicKey: &protocommon.PublicKey{
				RawBytes:   der,
				KeyDetails: protocommon.PublicKeyDetails_PKIX_ECDSA_P256_SHA_256,
				ValidFor:   &protocommon.TimeRange{Start: start},
			},
			LogId: &protocommon.LogId{KeyId: keyID},
		})
	}
	ctc := &prototrustroot.ClientTrustConfig{
		MediaType: verify.MediaTypeClientTrustConfig,
		TrustedRoot: &prototrustroot.TrustedRoot{
			MediaType: verify.MediaTypeTrustedRoot,
			Tlogs:     logs,
			CertificateAuthorities: []*prototrustroot.CertificateAuthority{{
				Subject: &protocommon.DistinguishedName{Organization: "warden tests", CommonName: "test fulcio"},
				Uri:     "https://fulcio.test.invalid",
				CertChain: &protocommon.X509CertificateChain{Certificates: []*protocommon.X509Certificate{
					{RawBytes: s.Intermediate.Raw}, {RawBytes: s.Root.Raw},
				}},
				ValidFor: &protocommon.TimeRange{Start: start},
			}},
		},
	}
	b, err := protojson.Marshal(ctc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TrustConfigFile writes TrustConfig to a file and returns its path.
func (s *Sigstore) TrustConfigFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sigstore-trust-config.json")
	if err := os.WriteFile(path, s.TrustConfig(t), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TrustRoot returns the verify.TrustRoot of TrustConfig.
func (s *Sigstore) TrustRoot(t testing.TB) *verify.TrustRoot {
	t.Helper()
	tr, err := verify.ParseTrustConfig(s.TrustConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Identity is who a keyless signature claims to be, and what it carries.
type Identity struct {
	// Subject is an email address, or a URI (a GitHub Actions workflow:
	// https://github.com/<owner>/<repo>/.github/workflows/x.yml@refs/heads/main).
	Subject string
	// Issuer is the OIDC issuer.
	Issuer string
	// Annotations are signed with the payload.
	Annotations map[string]string
	// NoLogEntry leaves the transparency-log entry out.
	NoLogEntry bool
}

// Leaf issues a signing certificate for id, valid from a minute ago for
// ten minutes, as Fulcio issues one, with a fresh key.
func (s *Sigstore) Leaf(t testing.TB, id Identity) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	issuerV2, err := asn1.MarshalWithParams(id.Issuer, "utf8")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(10 * time.Minute),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		ExtraExtensions: []pkix.Extension{
			{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 1}, Value: []byte(id.Issuer)},
			{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}, Value: issuerV2},
		},
	}
	if strings.Contains(id.Subject, "://") {
		u, err := url.Parse(id.Subject)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	} else {
		tmpl.EmailAddresses = []string{id.Subject}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.Intermediate, &key.PublicKey, s.intermediateKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func sign(t testing.TB, key *ecdsa.PrivateKey, data []byte) []byte {
	t.Helper()
	sum := sha256.Sum256(data)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// logEntry records body in the Rekor log, now: it returns the entry with
// its signed entry timestamp and, when proof is set, its inclusion proof.
func (s *Sigstore) logEntry(t testing.TB, body []byte, kind string, proof bool) *protorekor.TransparencyLogEntry {
	t.Helper()
	logID, err := s.rekor.RekorLogID()
	if err != nil {
		t.Fatal(err)
	}
	keyID, _ := hex.DecodeString(logID)
	now := time.Now().Unix()
	set, err := s.rekor.RekorSignPayload(tlog.RekorPayload{
		Body: base64.StdEncoding.EncodeToString(body), IntegratedTime: now, LogIndex: 0, LogID: logID,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &protorekor.TransparencyLogEntry{
		LogIndex:          0,
		LogId:             &protocommon.LogId{KeyId: keyID},
		KindVersion:       &protorekor.KindVersion{Kind: kind, Version: "0.0.1"},
		IntegratedTime:    now,
		InclusionPromise:  &protorekor.InclusionPromise{SignedEntryTimestamp: set},
		CanonicalizedBody: body,
	}
	if proof {
		p, err := s.rekor.GetInclusionProof(body)
		if err != nil {
			t.Fatal(err)
		}
		root, _ := hex.DecodeString(*p.RootHash)
		var hashes [][]byte
		for _, h := range p.Hashes {
			b, _ := hex.DecodeString(h)
			hashes = append(hashes, b)
		}
		e.LogIndex = *p.LogIndex
		e.InclusionProof = &protorekor.InclusionProof{
			LogIndex: *p.LogIndex, RootHash: root, TreeSize: *p.TreeSize, Hashes: hashes,
			Checkpoint: &protorekor.Checkpoint{Envelope: *p.Checkpoint},
		}
	}
	return e
}

// rekorBody writes a Rekor entry of the given kind: hashedrekord (a
// signature over a SHA-256 digest) or dsse (a signed DSSE envelope).
func rekorBody(t testing.TB, kind string, spec any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"apiVersion": "0.0.1", "kind": kind, "spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hexSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// KeylessLayer signs the manifest digest of repo (host/repo) as cosign
// sign does keylessly, and returns the signature layer, for
// WriteSignatures: the simple-signing payload with id's annotations,
// signed with the key of a fresh certificate for id, which goes into the
// layer with the authority's chain, and the Rekor bundle that records it
// (unless id.NoLogEntry).
func (s *Sigstore) KeylessLayer(t testing.TB, repo, manifestDigest string, id Identity) Layer {
	t.Helper()
	cert, key := s.Leaf(t, id)
	payload := Payload(repo, manifestDigest, id.Annotations)
	sig := sign(t, key, payload)
	annotations := map[string]string{
		verify.AnnotationCertificate: string(pemCert(cert)),
		verify.AnnotationChain:       string(pemCert(s.Intermediate)) + string(pemCert(s.Root)),
	}
	if !id.NoLogEntry {
		annotations[verify.AnnotationBundle] = s.RekorBundle(t, payload, sig, pemCert(cert))
	}
	return Layer{Payload: payload, Signature: sig, Annotations: annotations}
}

// RekorBundle records, now, a signature sig over payload made with the
// key of certPEM (a PEM certificate or public key) in the Rekor log, and
// returns cosign's Rekor bundle annotation for it: the hashedrekord entry
// and its signed entry timestamp.
func (s *Sigstore) RekorBundle(t testing.TB, payload, sig, certPEM []byte) string {
	t.Helper()
	body := rekorBody(t, "hashedrekord", map[string]any{
		"data": map[string]any{"hash": map[string]string{"algorithm": "sha256", "value": hexSum(payload)}},
		"signature": map[string]any{
			"content":   base64.StdEncoding.EncodeToString(sig),
			"publicKey": map[string]string{"content": base64.StdEncoding.EncodeToString(certPEM)},
		},
	})
	e := s.logEntry(t, body, "hashedrekord", false)
	rb, err := json.Marshal(map[string]any{
		"SignedEntryTimestamp": e.InclusionPromise.SignedEntryTimestamp,
		"Payload": map[string]any{
			"body": base64.StdEncoding.EncodeToString(body), "integratedTime": e.IntegratedTime,
			"logIndex": e.LogIndex, "logID": hex.EncodeToString(e.LogId.KeyId),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(rb)
}

// Bundle signs the manifest digest as cosign v3 sign does: a DSSE
// envelope of an in-toto statement (predicate type
// https://sigstore.dev/cosign/sign/v1) whose subject is the digest, with
// id's annotations on the subject, in a Sigstore v0.3 bundle with the
// certificate and the Rekor entry and its inclusion proof (unless
// id.NoLogEntry). It returns the bundle's JSON.
func (s *Sigstore) Bundle(t testing.TB, manifestDigest string, id Identity) []byte {
	t.Helper()
	cert, key := s.Leaf(t, id)
	statement := cosignStatement(t, manifestDigest, id.Annotations)
	sig := sign(t, key, pae(statement))
	b := &protobundle.Bundle{
		MediaType: verify.MediaTypeBundle,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: cert.Raw}},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: statement, PayloadType: inTotoPayloadType, Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	}
	if !id.NoLogEntry {
		envelope, err := json.Marshal(map[string]any{
			"payload": base64.StdEncoding.EncodeToString(statement), "payloadType": inTotoPayloadType,
			"signatures": []any{map[string]string{"sig": base64.StdEncoding.EncodeToString(sig)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		body := rekorBody(t, "dsse", map[string]any{
			"envelopeHash": map[string]string{"algorithm": "sha256", "value": hexSum(envelope)},
			"payloadHash":  map[string]string{"algorithm": "sha256", "value": hexSum(statement)},
			"signatures": []any{map[string]string{
				"signature": base64.StdEncoding.EncodeToString(sig),
				"verifier":  base64.StdEncoding.EncodeToString(pemCert(cert)),
			}},
		})
		b.VerificationMaterial.TlogEntries = []*protorekor.TransparencyLogEntry{s.logEntry(t, body, "dsse", true)}
	}
	out, err := protojson.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const inTotoPayloadType = "application/vnd.in-toto+json"

// cosignStatement is the in-toto statement cosign v3 signs for an image:
// its digest as the subject, with the annotations, and cosign's predicate
// type.
func cosignStatement(t testing.TB, manifestDigest string, annotations map[string]string) []byte {
	t.Helper()
	alg, hexDigest, _ := strings.Cut(manifestDigest, ":")
	subject := map[string]any{"digest": map[string]string{alg: hexDigest}}
	if len(annotations) > 0 {
		subject["annotations"] = annotations
	}
	statement, err := json.Marshal(map[string]any{
		"_type": "https://in-toto.io/Statement/v1", "subject": []any{subject},
		"predicateType": verify.PredicateTypeCosignSign, "predicate": map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return statement
}

// pae is DSSE's pre-authentication encoding of an in-toto statement.
func pae(statement []byte) []byte {
	return []byte(fmt.Sprintf("DSSEv1 %d %s %d %s", len(inTotoPayloadType), inTotoPayloadType, len(statement), statement))
}

// KeyBundle signs the manifest digest with k as cosign v3 sign --key
// --tlog-upload=false does: a Sigstore v0.3 bundle whose DSSE envelope
// holds cosign's in-toto statement with the annotations, and whose
// verification material is a hint of the public key. It returns the
// bundle's JSON.
func KeyBundle(t testing.TB, k *Key, manifestDigest string, annotations map[string]string) []byte {
	t.Helper()
	statement := cosignStatement(t, manifestDigest, annotations)
	b := &protobundle.Bundle{
		MediaType: verify.MediaTypeBundle,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{Hint: "test key"}},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: statement, PayloadType: inTotoPayloadType, Signatures: []*protodsse.Signature{{Sig: k.SignBytes(t, pae(statement))}},
		}},
	}
	out, err := protojson.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// AttachBundle attaches a Sigstore bundle (its JSON) to the manifest
// manifestDigest of repo (host/repo) as cosign v3 does: an OCI manifest of
// artifactType verify.MediaTypeBundle, with the empty config, the bundle
// as its only layer and the module's manifest as its subject, so that the
// registry lists it among the referrers of the module (or, lacking the
// referrers API, oras-go adds it to the sha256-<hex> index). It returns
// the bundle manifest's digest.
func AttachBundle(t testing.TB, f *policyfetch.Fetcher, repo, manifestDigest string, bundleJSON []byte) string {
	t.Helper()
	ctx := context.Background()
	layer := ocispec.Descriptor{MediaType: verify.MediaTypeBundle, Digest: digest.FromBytes(bundleJSON), Size: int64(len(bundleJSON))}
	if err := f.PushBlob(ctx, repo, layer, bundleJSON); err != nil {
		t.Fatal(err)
	}
	empty := []byte("{}")
	config := ocispec.Descriptor{MediaType: ocispec.MediaTypeEmptyJSON, Digest: digest.FromBytes(empty), Size: int64(len(empty))}
	if err := f.PushBlob(ctx, repo, config, empty); err != nil {
		t.Fatal(err)
	}
	m, err := f.FetchManifest(ctx, repo+"@"+manifestDigest)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: verify.MediaTypeBundle,
		Config:       config,
		Layers:       []ocispec.Descriptor{layer},
		Subject:      &ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.Digest(manifestDigest), Size: int64(len(m.Bytes))},
		Annotations:  map[string]string{"dev.sigstore.bundle.content": "dsse-envelope", "dev.sigstore.bundle.predicateType": verify.PredicateTypeCosignSign},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.PushManifest(ctx, repo+":bundle-"+digest.FromBytes(bundleJSON).Encoded()[:16], ocispec.MediaTypeImageManifest, manifest)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
