package verify

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	sgverify "github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/wardenhq/warden/internal/policyfetch"
)

// Verifier checks modules against a Config. It implements
// policyfetch.Verifier. It holds no state between calls and is safe for
// concurrent use.
type Verifier struct {
	cfg   *Config
	trust *TrustRoot
	sg    *sgverify.Verifier // checks keyless signatures against trust
	now   func() time.Time
}

// Option configures a Verifier.
type Option func(*Verifier)

// WithTrustRoot makes the Verifier check keyless signatures (genericIssuer
// and githubAction requirements) and Rekor bundles (requireRekorBundle)
// against t. Without it they are never met.
func WithTrustRoot(t *TrustRoot) Option {
	return func(v *Verifier) { v.trust = t }
}

// New returns a Verifier for cfg. A cfg built in Go rather than by
// ParseConfig, LoadConfig or KeyConfig is checked, and its keys and
// certificates parsed, now; errors name the field. cfg must not be modified
// afterwards.
func New(cfg *Config, opts ...Option) (*Verifier, error) {
	if cfg == nil {
		return nil, errors.New("verify: no config")
	}
	if !cfg.compiled {
		if err := cfg.compile(); err != nil {
			return nil, err
		}
	}
	v := &Verifier{cfg: cfg, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	if v.trust != nil {
		// A keyless signature must be recorded in a Rekor log of the
		// trust root, and dated by that log's entry or by a timestamping
		// authority of the trust root (Rekor v2 entries carry no time);
		// its certificate must be valid at that date.
		sg, err := sgverify.NewVerifier(v.trust.material, sgverify.WithTransparencyLog(1), sgverify.WithObserverTimestamps(1))
		if err != nil {
			return nil, fmt.Errorf("sigstore trust root: %w", err)
		}
		v.sg = sg
	}
	return v, nil
}

// Result tells what Verify found.
type Result struct {
	// URI is the module URI as given.
	URI string
	// ManifestDigest is the digest of the verified manifest.
	ManifestDigest string
	// Signatures is how many cosign signatures the module has.
	Signatures int
	// Satisfied describes the requirements met, as "allOf[0] (pubKey,
	// owner alice)".
	Satisfied []string
}

// Verify checks the module at uri (registry://host/repo:tag,
// registry://host/repo@sha256:..., or the same without registry://) without
// pulling its layer, reading the registry through f: it resolves the
// manifest digest, reads the cosign signatures stored beside it and checks
// them against the Config. This is what wardenctl verify does. Errors read
// "verifying <uri>: <cause>" on one line; errors.Is finds ErrNotSigned or
// ErrNotTrusted in them when the module was reached.
func (v *Verifier) Verify(ctx context.Context, f *policyfetch.Fetcher, uri string) (*Result, error) {
	res, err := v.verify(ctx, f, uri)
	if err != nil {
		return nil, fmt.Errorf("verifying %s: %w", uri, err)
	}
	return res, nil
}

func (v *Verifier) verify(ctx context.Context, f *policyfetch.Fetcher, uri string) (*Result, error) {
	repo, err := splitRepository(uri)
	if err != nil {
		return nil, err
	}
	man, err := f.FetchManifest(ctx, uri)
	if err != nil {
		return nil, err
	}
	return v.check(ctx, f, policyfetch.Target{URI: uri, Repository: repo, ManifestDigest: man.Digest})
}

// VerifyModule implements policyfetch.Verifier: it returns nil when the
// signatures of t.ManifestDigest meet the Config, and otherwise an error
// that tells why on one line (ErrNotSigned or ErrNotTrusted inside when the
// signatures could be read).
func (v *Verifier) VerifyModule(ctx context.Context, f *policyfetch.Fetcher, t policyfetch.Target) error {
	_, err := v.check(ctx, f, t)
	return err
}

func (v *Verifier) check(ctx context.Context, f *policyfetch.Fetcher, t policyfetch.Target) (*Result, error) {
	sigs, err := v.readAll(ctx, f, t)
	if err != nil {
		return nil, err
	}
	res := &Result{URI: t.URI, ManifestDigest: t.ManifestDigest, Signatures: len(sigs.layers) + len(sigs.bundles)}
	var failed []string
	for i := range v.cfg.AllOf {
		s := &v.cfg.AllOf[i]
		if why := v.unmet(s, sigs, t.ManifestDigest); why != "" {
			failed = append(failed, s.describe()+": "+why)
			continue
		}
		res.Satisfied = append(res.Satisfied, s.describe())
	}
	if a := v.cfg.AnyOf; a != nil {
		var (
			matched int
			whys    []string
		)
		for i := range a.Signatures {
			s := &a.Signatures[i]
			if why := v.unmet(s, sigs, t.ManifestDigest); why != "" {
				whys = append(whys, s.describe()+": "+why)
				continue
			}
			matched++
			res.Satisfied = append(res.Satisfied, s.describe())
		}
		if matched < a.MinimumMatches {
			failed = append(failed, fmt.Sprintf("anyOf: %d of the minimumMatches %d met (%s)", matched, a.MinimumMatches, strings.Join(whys, "; ")))
		}
	}
	if len(failed) > 0 {
		if sigs.bundlesErr != nil {
			failed = append(failed, sigs.bundlesErr.Error())
		}
		return nil, fmt.Errorf("%w: %s", ErrNotTrusted, strings.Join(failed, "; "))
	}
	return res, nil
}

// signatures are the signatures of a module.
type signatures struct {
	layers  []sigLayer    // cosign's signature layers
	bundles []*keylessSig // Sigstore bundles attached as referrers
	keyless []*keylessSig // the layers with a certificate, and the bundles

	bundlesErr error // why the bundles could not be read, when the layers could
}

// readAll reads the signatures of t: the cosign signature layers, and the
// Sigstore bundles attached to it as referrers. Finding neither is
// ErrNotSigned.
func (v *Verifier) readAll(ctx context.Context, f *policyfetch.Fetcher, t policyfetch.Target) (*signatures, error) {
	layers, err := readSignatures(ctx, f, t.Repository, t.ManifestDigest)
	if err != nil && !errors.Is(err, ErrNotSigned) {
		return nil, err
	}
	notSigned := err
	bundles, err := readBundles(ctx, f, t.Repository, t.ManifestDigest)
	if err != nil && notSigned != nil {
		return nil, err
	}
	if notSigned != nil && len(bundles) == 0 {
		return nil, fmt.Errorf("%w and no Sigstore bundle refers to it", notSigned)
	}
	// A registry that fails to list referrers does not hide the
	// signature layers; the error explains a failure.
	sigs := &signatures{layers: layers, bundles: bundles, bundlesErr: err}
	if len(v.cfg.Keyless()) > 0 {
		for _, l := range layers {
			if l.cert != "" {
				sigs.keyless = append(sigs.keyless, keylessLayer(l))
			}
		}
		sigs.keyless = append(sigs.keyless, bundles...)
	}
	return sigs, nil
}

// unmet returns why no signature meets s, or "" when one does.
func (v *Verifier) unmet(s *Signature, sigs *signatures, digest string) string {
	switch s.Kind {
	case KindGenericIssuer, KindGitHubAction:
		return v.unmetKeyless(s, sigs.keyless, digest)
	case KindCertificate:
		if err := v.checkCertificate(s); err != nil {
			return err.Error()
		}
		if s.RequireRekorBundle {
			// Only signature layers carry cosign's Rekor bundle.
			layersOnly := &signatures{layers: sigs.layers}
			if why := v.unmet(&Signature{Kind: KindCertificate, cert: s.cert, key: s.key, Annotations: s.Annotations}, layersOnly, digest); why != "" {
				return why
			}
			return v.unmetRekor(s, sigs.layers, digest)
		}
	}
	best, why := -1, ""
	consider := func(rank int, w string) {
		if rank > best {
			best, why = rank, w
		}
	}
	for _, l := range sigs.layers {
		rank, w := checkLayer(s.key, l, digest, s.Annotations)
		if rank == rankMet {
			return ""
		}
		consider(rank, w)
	}
	for _, b := range sigs.bundles {
		rank, w := checkKeyBundle(s.key, b, digest, s.Annotations)
		if rank == rankMet {
			return ""
		}
		consider(rank, w)
	}
	if best <= rankBadSignature {
		with := "this key (signed with another key, or altered)"
		if s.Kind == KindCertificate {
			with = "the certificate's key"
		}
		if n := len(sigs.layers) + len(sigs.bundles); n != 1 {
			return fmt.Sprintf("none of its %d signatures verifies with %s", n, with)
		}
		return "its signature does not verify with " + with
	}
	return why
}

// How close a signature layer comes to meeting a requirement; the closest
// explains a failure.
const (
	rankBadSignature  = iota // no signature, or one that does not verify
	rankIdentity             // keyless, trusted, signed by someone else
	rankBadPayload           // signed, but not a cosign image signature
	rankOtherManifest        // signed, for another manifest
	rankAnnotations          // signed for this manifest, annotations differ
	rankMet
)

// checkLayer checks one signature layer against a key, the manifest digest
// and the required annotations.
func checkLayer(key signature.Verifier, l sigLayer, digest string, want map[string]string) (int, string) {
	if l.sig == nil || key == nil {
		return rankBadSignature, ""
	}
	if err := key.VerifySignature(bytes.NewReader(l.sig), bytes.NewReader(l.payload)); err != nil {
		return rankBadSignature, ""
	}
	var p payload.SimpleContainerImage
	if err := json.Unmarshal(l.payload, &p); err != nil {
		return rankBadPayload, fmt.Sprintf("signature %d verifies, but its payload is not JSON: %v", l.index+1, err)
	}
	if p.Critical.Type != payload.CosignSignatureType {
		return rankBadPayload, fmt.Sprintf("signature %d verifies, but its payload type is %q, not %q", l.index+1, p.Critical.Type, payload.CosignSignatureType)
	}
	if got := p.Critical.Image.DockerManifestDigest; got != digest {
		return rankOtherManifest, fmt.Sprintf("signature %d verifies, but it signs manifest %s, not %s", l.index+1, got, digest)
	}
	for _, k := range sortedKeys(want) {
		got, ok := p.Optional[k]
		if !ok {
			return rankAnnotations, fmt.Sprintf("signature %d verifies, but it has no annotation %s (want %q)", l.index+1, k, want[k])
		}
		if s, isString := got.(string); !isString || s != want[k] {
			g, _ := json.Marshal(got)
			return rankAnnotations, fmt.Sprintf("signature %d verifies, but its annotation %s is %s, not %q", l.index+1, k, g, want[k])
		}
	}
	return rankMet, ""
}

// checkCertificate checks, offline, that the certificate of s is valid now,
// is for code signing and, when a chain is given, chains to it.
func (v *Verifier) checkCertificate(s *Signature) error {
	c, now := s.cert, v.now()
	if now.Before(c.NotBefore) {
		return fmt.Errorf("the certificate is not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(c.NotAfter) {
		return fmt.Errorf("the certificate expired at %s", c.NotAfter.UTC().Format(time.RFC3339))
	}
	if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		return errors.New("the certificate is not for digital signatures (key usage)")
	}
	if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageCodeSigning) && !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return errors.New("the certificate is not for code signing (extended key usage)")
	}
	if len(s.chain) == 0 {
		return nil // trusted as given, as Kubewarden does
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	nroots := 0
	for _, cc := range s.chain {
		if bytes.Equal(cc.RawSubject, cc.RawIssuer) && cc.CheckSignatureFrom(cc) == nil {
			roots.AddCert(cc)
			nroots++
		} else {
			inter.AddCert(cc)
		}
	}
	if nroots == 0 { // no root given: the chain's certificates are the anchors
		roots, inter = inter, x509.NewCertPool()
	}
	_, err := c.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	})
	if err != nil {
		return fmt.Errorf("the certificate does not chain to certificateChain: %w", err)
	}
	return nil
}

// Keyless lists the requirements of cfg that need a Sigstore trust root
// (keyless kinds, and certificates that require a Rekor bundle), as
// "allOf[0] (githubAction, owner kubewarden)". Without WithTrustRoot they
// are never met; the policy server warns about them at start.
func (c *Config) Keyless() []string {
	var out []string
	visit := func(sigs []Signature) {
		for i := range sigs {
			s := &sigs[i]
			if s.Kind == KindGenericIssuer || s.Kind == KindGitHubAction || (s.Kind == KindCertificate && s.RequireRekorBundle) {
				out = append(out, s.describe())
			}
		}
	}
	visit(c.AllOf)
	if c.AnyOf != nil {
		visit(c.AnyOf.Signatures)
	}
	return out
}
