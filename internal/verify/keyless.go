package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	sgverify "github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/wardenhq/warden/internal/pki"
	"github.com/wardenhq/warden/internal/policyfetch"
)

// Keyless signatures: how cosign stores them and what Sigstore calls them.
const (
	// AnnotationChain is the layer annotation that holds the PEM chain of
	// a keyless signature's certificate (Fulcio's intermediate and root).
	AnnotationChain = "dev.sigstore.cosign/chain"
	// MediaTypeBundle is the media type of a Sigstore v0.3 bundle, which
	// cosign v3 attaches to a manifest as an OCI referrer whose
	// artifactType and only layer have this type.
	MediaTypeBundle = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// PredicateTypeCosignSign is the predicate type of the in-toto
	// statement cosign v3 signs for an image (cosign sign).
	PredicateTypeCosignSign = "https://sigstore.dev/cosign/sign/v1"
	// GitHubActionsIssuer is the OIDC issuer of GitHub Actions' tokens, that
	// of every githubAction signature.
	GitHubActionsIssuer = "https://token.actions.githubusercontent.com"

	mediaTypeBundleV01 = "application/vnd.dev.sigstore.bundle+json;version=0.1"
	inTotoPayloadType  = "application/vnd.in-toto+json"
	// maxBundles caps the Sigstore bundles read for one module.
	maxBundles = 64
)

// noTrustRoot says why a keyless requirement fails without a trust root.
const noTrustRoot = "keyless signatures need a Sigstore trust root (--sigstore-trust-config, or the PolicyServer's spec.sigstoreTrustConfig), which Warden never fetches"

// keylessSig is a signature whose certificate, rather than a key, says who
// signed: a cosign signature layer with a certificate, or a Sigstore
// bundle. check fills the fields after entity.
type keylessSig struct {
	name    string // for messages: "signature 2", "bundle sha256:<hex>"
	entity  *bundle.Bundle
	payload []byte // a layer's simple-signing payload; nil for a bundle
	broken  string // why it could not even be read, "" when it could

	checked     bool
	err         error  // why Sigstore's checks fail, nil when they pass
	issuer      string // the OIDC issuer its certificate names
	subject     string // the certificate's subject (email or URI)
	signs       string // the manifest digest it signs
	kind        string // what it signs, when not a cosign image signature
	annotations map[string]any
}

// keylessLayer turns a cosign signature layer with a certificate into a
// Sigstore v0.1 bundle (message signature over the payload, the
// certificate and its chain, the Rekor entry of the layer's bundle
// annotation), so that sigstore-go checks both layouts alike.
func keylessLayer(l sigLayer) *keylessSig {
	k := &keylessSig{name: fmt.Sprintf("signature %d", l.index+1), payload: l.payload}
	if l.sig == nil {
		k.broken = "its signature annotation is missing or not base64"
		return k
	}
	certs, err := pki.ParseCertificates([]byte(l.cert))
	if err != nil {
		k.broken = "its certificate annotation: " + err.Error()
		return k
	}
	if l.chain != "" {
		chain, err := pki.ParseCertificates([]byte(l.chain))
		if err != nil {
			k.broken = "its chain annotation: " + err.Error()
			return k
		}
		certs = append(certs, chain...)
	}
	var pbCerts []*protocommon.X509Certificate
	for _, c := range certs {
		pbCerts = append(pbCerts, &protocommon.X509Certificate{RawBytes: c.Raw})
	}
	sum := sha256.Sum256(l.payload)
	pb := &protobundle.Bundle{
		MediaType: mediaTypeBundleV01,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_X509CertificateChain{
				X509CertificateChain: &protocommon.X509CertificateChain{Certificates: pbCerts},
			},
		},
		Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: sum[:]},
			Signature:     l.sig,
		}},
	}
	if l.rekorBundle != "" {
		entry, err := rekorEntry(l.rekorBundle)
		if err != nil {
			k.broken = "its Rekor bundle annotation: " + err.Error()
			return k
		}
		pb.VerificationMaterial.TlogEntries = []*protorekor.TransparencyLogEntry{entry}
	}
	if k.entity, err = bundle.NewBundle(pb); err != nil {
		k.broken = err.Error()
	}
	return k
}

// rekorEntry reads cosign's Rekor bundle annotation: the signed entry
// timestamp and the entry it signs.
func rekorEntry(annotation string) (*protorekor.TransparencyLogEntry, error) {
	var rb struct {
		SignedEntryTimestamp []byte
		Payload              struct {
			Body           string `json:"body"`
			IntegratedTime int64  `json:"integratedTime"`
			LogIndex       int64  `json:"logIndex"`
			LogID          string `json:"logID"`
		}
	}
	if err := json.Unmarshal([]byte(annotation), &rb); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	body, err := base64.StdEncoding.DecodeString(rb.Payload.Body)
	if err != nil {
		return nil, fmt.Errorf("its body is not base64: %w", err)
	}
	logID, err := hex.DecodeString(rb.Payload.LogID)
	if err != nil {
		return nil, fmt.Errorf("its logID is not hex: %w", err)
	}
	var kv struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(body, &kv); err != nil {
		return nil, fmt.Errorf("its body is not a Rekor entry: %w", err)
	}
	return &protorekor.TransparencyLogEntry{
		LogIndex:          rb.Payload.LogIndex,
		LogId:             &protocommon.LogId{KeyId: logID},
		KindVersion:       &protorekor.KindVersion{Kind: kv.Kind, Version: kv.APIVersion},
		IntegratedTime:    rb.Payload.IntegratedTime,
		InclusionPromise:  &protorekor.InclusionPromise{SignedEntryTimestamp: rb.SignedEntryTimestamp},
		CanonicalizedBody: body,
	}, nil
}

// readBundles reads the Sigstore bundles attached to the manifest digest
// of repo as OCI referrers, the way cosign v3 attaches them: each a
// manifest of artifactType MediaTypeBundle whose layer of that type is the
// bundle's JSON.
func readBundles(ctx context.Context, f *policyfetch.Fetcher, repo, digest string) ([]*keylessSig, error) {
	refs, err := f.Referrers(ctx, repo, digest, MediaTypeBundle)
	if err != nil {
		return nil, fmt.Errorf("reading its Sigstore bundles: %w", err)
	}
	if len(refs) > maxBundles {
		return nil, fmt.Errorf("reading its Sigstore bundles: %s@%s has more than %d", repo, digest, maxBundles)
	}
	var out []*keylessSig
	for _, r := range refs {
		k := &keylessSig{name: "bundle " + r.Digest.String()}
		out = append(out, k)
		man, err := f.FetchManifest(ctx, repo+"@"+r.Digest.String())
		if err != nil {
			return nil, fmt.Errorf("reading its Sigstore bundles: %w", err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(man.Bytes, &m); err != nil {
			k.broken = "its manifest is not an image manifest"
			continue
		}
		if m.Subject == nil || m.Subject.Digest.String() != digest {
			k.broken = "its manifest's subject is not " + digest
			continue
		}
		var layer *ocispec.Descriptor
		for i := range m.Layers {
			if m.Layers[i].MediaType == MediaTypeBundle {
				layer = &m.Layers[i]
				break
			}
		}
		if layer == nil {
			k.broken = "its manifest has no layer of type " + MediaTypeBundle
			continue
		}
		if layer.Size > maxPayloadBytes {
			k.broken = fmt.Sprintf("its bundle is %d bytes, more than the %d limit", layer.Size, maxPayloadBytes)
			continue
		}
		data, err := f.FetchBlob(ctx, repo, *layer)
		if err != nil {
			return nil, fmt.Errorf("reading its Sigstore bundles: %w", err)
		}
		b := &bundle.Bundle{Bundle: new(protobundle.Bundle)}
		if err := b.UnmarshalJSON(data); err != nil {
			k.broken = "not a Sigstore bundle: " + oneLine(err.Error())
			continue
		}
		k.entity = b
	}
	return out, nil
}

// checkKeyless runs Sigstore's checks on k once, against the trust root:
// the certificate chains to a Fulcio authority of the trust root at the
// time a Rekor log of the trust root recorded the signature, the entry is
// signed by that log and matches the signature, and the signature verifies
// with the certificate's key. It then reads who signed and what.
func (v *Verifier) checkKeyless(k *keylessSig) {
	if k.checked {
		return
	}
	k.checked = true
	if k.broken != "" {
		k.err = errors.New(k.broken)
		return
	}
	if entries, err := k.entity.TlogEntries(); err == nil && len(entries) == 0 {
		k.err = errors.New("it has no transparency-log entry: a keyless signature must be recorded in Rekor")
		return
	}
	artifact := sgverify.WithoutArtifactUnsafe() // a bundle's statement is checked below
	if k.payload != nil {
		artifact = sgverify.WithArtifact(bytes.NewReader(k.payload))
	}
	res, err := v.sg.Verify(k.entity, sgverify.NewPolicy(artifact, sgverify.WithoutIdentitiesUnsafe()))
	if err != nil {
		k.err = explainSigstore(err)
		return
	}
	if res.Signature == nil || res.Signature.Certificate == nil {
		k.err = errors.New("it is signed with a key, not a certificate")
		return
	}
	k.issuer = res.Signature.Certificate.Issuer
	k.subject = res.Signature.Certificate.SubjectAlternativeName
	if k.payload != nil {
		var p payload.SimpleContainerImage
		if err := json.Unmarshal(k.payload, &p); err != nil || p.Critical.Type != payload.CosignSignatureType {
			k.kind = "a payload that is not a cosign image signature"
			return
		}
		k.signs = p.Critical.Image.DockerManifestDigest
		k.annotations = p.Optional
		return
	}
	k.readStatement()
}

// readStatement reads what a verified bundle signs; see statement.
func (k *keylessSig) readStatement() {
	k.signs, k.annotations, k.kind = statement(k.entity.GetDsseEnvelope())
}

// statement reads what a bundle's DSSE envelope signs: an in-toto
// statement of cosign's predicate type, whose subject digest is the
// manifest signed (signs) and whose subject annotations are the
// signature's. Otherwise kind describes what it signs instead.
func statement(env *protodsse.Envelope) (signs string, annotations map[string]any, kind string) {
	if env == nil {
		return "", nil, "a message, not a DSSE envelope (cosign sign writes an in-toto statement)"
	}
	if env.GetPayloadType() != inTotoPayloadType {
		return "", nil, fmt.Sprintf("a payload of type %q, not an in-toto statement", env.GetPayloadType())
	}
	var st struct {
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Digest      map[string]string `json:"digest"`
			Annotations map[string]any    `json:"annotations"`
		} `json:"subject"`
	}
	if err := json.Unmarshal(env.GetPayload(), &st); err != nil {
		return "", nil, "a payload that is not JSON"
	}
	if st.PredicateType != PredicateTypeCosignSign {
		return "", nil, fmt.Sprintf("an attestation of predicate type %q, not a cosign signature (%s)", st.PredicateType, PredicateTypeCosignSign)
	}
	if len(st.Subject) != 1 || st.Subject[0].Digest["sha256"] == "" {
		return "", nil, "a statement without exactly one sha256 subject"
	}
	return "sha256:" + st.Subject[0].Digest["sha256"], st.Subject[0].Annotations, ""
}

// checkKeyBundle checks a Sigstore bundle against a key (cosign v3 sign
// --key writes one): its DSSE envelope must be signed with the key (over
// DSSE's pre-authentication encoding), and its statement must sign this
// manifest and carry the annotations. Like signature layers checked
// against a key, its transparency-log entry is not required.
func checkKeyBundle(key signature.Verifier, b *keylessSig, digest string, want map[string]string) (int, string) {
	if key == nil || b.entity == nil {
		return rankBadSignature, ""
	}
	env := b.entity.GetDsseEnvelope()
	if env == nil {
		return rankBadSignature, ""
	}
	pae := dssePAE(env.GetPayloadType(), env.GetPayload())
	verified := false
	for _, sig := range env.GetSignatures() {
		if key.VerifySignature(bytes.NewReader(sig.GetSig()), bytes.NewReader(pae)) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return rankBadSignature, ""
	}
	signs, annotations, kind := statement(env)
	switch {
	case kind != "":
		return rankBadPayload, fmt.Sprintf("%s verifies, but it signs %s", b.name, kind)
	case signs != digest:
		return rankOtherManifest, fmt.Sprintf("%s verifies, but it signs manifest %s, not %s", b.name, signs, digest)
	}
	if w := missingAnnotation(annotations, want); w != "" {
		return rankAnnotations, fmt.Sprintf("%s verifies, but %s", b.name, w)
	}
	return rankMet, ""
}

// dssePAE is DSSE's pre-authentication encoding, what a DSSE signature
// signs.
func dssePAE(payloadType string, payload []byte) []byte {
	return []byte(fmt.Sprintf("DSSEv1 %d %s %d %s", len(payloadType), payloadType, len(payload), payload))
}

// identity says whether the certificate of k meets the identity s asks
// for, and describes the certificate otherwise.
func (s *Signature) identity(k *keylessSig) (bool, string) {
	switch s.Kind {
	case KindGenericIssuer:
		if k.issuer != s.Issuer {
			break
		}
		if s.Subject.Equal != "" && k.subject == s.Subject.Equal {
			return true, ""
		}
		if s.Subject.URLPrefix != "" && strings.HasPrefix(k.subject, s.Subject.URLPrefix) {
			return true, ""
		}
	case KindGitHubAction:
		if k.issuer != GitHubActionsIssuer {
			break
		}
		owner, repo, ok := gitHubRepository(k.subject)
		if ok && owner == s.Owner && (s.Repo == "" || repo == s.Repo) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%s was signed by subject %q with issuer %q", k.name, k.subject, k.issuer)
}

// gitHubRepository reads the owner and repository of a GitHub Actions
// workflow identity, https://github.com/<owner>/<repo>/.github/workflows/...
func gitHubRepository(subject string) (owner, repo string, ok bool) {
	u, err := url.Parse(subject)
	if err != nil || u.Scheme != "https" || u.Host != "github.com" {
		return "", "", false
	}
	parts := strings.SplitN(strings.TrimPrefix(u.Path, "/"), "/", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// unmetKeyless returns why no keyless signature meets s, or "" when one
// does.
func (v *Verifier) unmetKeyless(s *Signature, sigs []*keylessSig, digest string) string {
	if v.trust == nil {
		return noTrustRoot
	}
	if len(sigs) == 0 {
		return "the module has no keyless signature (no cosign signature with a certificate, no Sigstore bundle)"
	}
	best, why := -1, ""
	consider := func(rank int, w string) {
		if rank > best {
			best, why = rank, w
		}
	}
	for _, k := range sigs {
		v.checkKeyless(k)
		if k.err != nil {
			consider(rankBadSignature, fmt.Sprintf("%s is not trusted: %v", k.name, k.err))
			continue
		}
		if ok, w := s.identity(k); !ok {
			consider(rankIdentity, w)
			continue
		}
		if k.kind != "" {
			consider(rankBadPayload, fmt.Sprintf("%s is trusted, but it signs %s", k.name, k.kind))
			continue
		}
		if k.signs != digest {
			consider(rankOtherManifest, fmt.Sprintf("%s is trusted, but it signs manifest %s, not %s", k.name, k.signs, digest))
			continue
		}
		if w := missingAnnotation(k.annotations, s.Annotations); w != "" {
			consider(rankAnnotations, fmt.Sprintf("%s is trusted, but %s", k.name, w))
			continue
		}
		return ""
	}
	if len(sigs) > 1 && best == rankBadSignature {
		return fmt.Sprintf("none of its %d keyless signatures is trusted (%s)", len(sigs), why)
	}
	return why
}

// unmetRekor returns why the signature layers that verify with the key of
// a certificate requirement have no Rekor entry signed by a log of the
// trust root that records them, or "" when one has.
func (v *Verifier) unmetRekor(s *Signature, layers []sigLayer, digest string) string {
	if v.trust == nil {
		return "requireRekorBundle needs a Sigstore trust root with Rekor's public key (--sigstore-trust-config, or the PolicyServer's spec.sigstoreTrustConfig)"
	}
	why := "no signature that verifies with the certificate's key has a Rekor bundle"
	for _, l := range layers {
		if rank, _ := checkLayer(s.key, l, digest, s.Annotations); rank != rankMet {
			continue
		}
		if l.rekorBundle == "" {
			continue
		}
		entry, err := rekorEntry(l.rekorBundle)
		if err != nil {
			why = fmt.Sprintf("signature %d: its Rekor bundle annotation: %v", l.index+1, err)
			continue
		}
		sum := sha256.Sum256(l.payload)
		b, err := bundle.NewBundle(&protobundle.Bundle{
			MediaType: mediaTypeBundleV01,
			VerificationMaterial: &protobundle.VerificationMaterial{
				Content: &protobundle.VerificationMaterial_X509CertificateChain{X509CertificateChain: &protocommon.X509CertificateChain{
					Certificates: []*protocommon.X509Certificate{{RawBytes: s.cert.Raw}},
				}},
				TlogEntries: []*protorekor.TransparencyLogEntry{entry},
			},
			Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
				MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: sum[:]},
				Signature:     l.sig,
			}},
		})
		if err == nil {
			_, err = sgverify.VerifyTlogEntry(b, v.trust.material, 1, true)
		}
		if err != nil {
			why = fmt.Sprintf("signature %d: its Rekor bundle does not verify: %s", l.index+1, oneLine(err.Error()))
			continue
		}
		return ""
	}
	return why
}

// missingAnnotation says which of want got lacks or differs in, "" when
// got carries them all.
func missingAnnotation(got map[string]any, want map[string]string) string {
	for _, k := range sortedKeys(want) {
		g, ok := got[k]
		if !ok {
			return fmt.Sprintf("it has no annotation %s (want %q)", k, want[k])
		}
		if s, isString := g.(string); !isString || s != want[k] {
			b, _ := json.Marshal(g)
			return fmt.Sprintf("its annotation %s is %s, not %q", k, b, want[k])
		}
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// explainSigstore words the most common failures of sigstore-go's checks
// in terms of the trust root, keeping its own message as the detail.
func explainSigstore(err error) error {
	msg := oneLine(err.Error())
	switch {
	case strings.HasPrefix(msg, "failed to verify log inclusion"):
		return fmt.Errorf("its transparency-log entry is not signed by a Rekor log of the trust root, or does not record this signature (%s)", msg)
	case strings.HasPrefix(msg, "failed to verify leaf certificate"):
		return fmt.Errorf("its certificate was not issued by a certificate authority of the trust root, or not when the signature was logged (%s)", msg)
	case strings.HasPrefix(msg, "failed to verify signature"):
		return fmt.Errorf("the signature does not verify with its certificate's key: the signed content was altered (%s)", msg)
	}
	return errors.New(msg)
}
