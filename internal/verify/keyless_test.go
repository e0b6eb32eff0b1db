package verify_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

const (
	testIssuer   = "https://oidc.test.invalid"
	testWorkflow = "https://github.com/acme/policies/.github/workflows/release.yml@refs/tags/v1"
)

// keylessVerifier parses a verification.yml and returns its Verifier,
// trusting ss.
func keylessVerifier(t *testing.T, doc string, ss *verifytest.Sigstore) *verify.Verifier {
	t.Helper()
	c, err := verify.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var opts []verify.Option
	if ss != nil {
		opts = append(opts, verify.WithTrustRoot(ss.TrustRoot(t)))
	}
	v, err := verify.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const (
	genericIssuer = `apiVersion: v1
allOf:
- kind: genericIssuer
  issuer: https://oidc.test.invalid
  subject:
    equal: alice@example.com
`
	genericIssuerPrefix = `apiVersion: v1
allOf:
- kind: genericIssuer
  issuer: https://token.actions.githubusercontent.com
  subject:
    urlPrefix: https://github.com/acme
`
	gitHubAction = `apiVersion: v1
allOf:
- kind: githubAction
  owner: acme
  repo: policies
`
	genericIssuerAnnotated = `apiVersion: v1
allOf:
- kind: genericIssuer
  issuer: https://oidc.test.invalid
  subject:
    equal: alice@example.com
  annotations:
    env: prod
`
)

// TestKeylessSignatures signs a module keylessly, with a test Fulcio and
// Rekor, in both layouts, cosign's signature image (sha256-<hex>.sig) and
// cosign v3's Sigstore bundle attached as a referrer, and checks which
// requirements it meets.
func TestKeylessSignatures(t *testing.T) {
	fx := newFixture(t)
	ss := verifytest.NewSigstore(t)
	otherCA := ss.OtherAuthority(t)        // another Fulcio, the same Rekor
	elsewhere := verifytest.NewSigstore(t) // another Fulcio and Rekor
	alice := verifytest.Identity{Subject: "alice@example.com", Issuer: testIssuer}
	withAnnotation := alice
	withAnnotation.Annotations = map[string]string{"env": "prod"}
	workflow := verifytest.Identity{Subject: testWorkflow, Issuer: verify.GitHubActionsIssuer}
	unlogged := alice
	unlogged.NoLogEntry = true

	// sign attaches a keyless signature of id, made by signer, in the
	// given layout.
	type signFunc func(t *testing.T, signer *verifytest.Sigstore, repo, digest string, id verifytest.Identity)
	layouts := map[string]signFunc{
		"signature image": func(t *testing.T, signer *verifytest.Sigstore, repo, digest string, id verifytest.Identity) {
			verifytest.WriteSignatures(t, fx.pub, repo, digest, signer.KeylessLayer(t, repo, digest, id))
		},
		"v3 bundle": func(t *testing.T, signer *verifytest.Sigstore, repo, digest string, id verifytest.Identity) {
			verifytest.AttachBundle(t, fx.pub, repo, digest, signer.Bundle(t, digest, id))
		},
	}
	for _, layout := range []string{"signature image", "v3 bundle"} {
		sign := layouts[layout]
		for _, tc := range []struct {
			name   string
			id     verifytest.Identity
			signer *verifytest.Sigstore
			doc    string
			trust  *verifytest.Sigstore
			want   string // "" when accepted
		}{
			{name: "issuer and subject", id: alice, signer: ss, doc: genericIssuer, trust: ss},
			{name: "url prefix", id: workflow, signer: ss, doc: genericIssuerPrefix, trust: ss},
			{name: "github action", id: workflow, signer: ss, doc: gitHubAction, trust: ss},
			{name: "annotations", id: withAnnotation, signer: ss, doc: genericIssuerAnnotated, trust: ss},
			{name: "wrong subject", id: verifytest.Identity{Subject: "mallory@example.com", Issuer: testIssuer}, signer: ss, doc: genericIssuer, trust: ss,
				want: `was signed by subject "mallory@example.com" with issuer "https://oidc.test.invalid"`},
			{name: "wrong issuer", id: verifytest.Identity{Subject: "alice@example.com", Issuer: "https://evil.test.invalid"}, signer: ss, doc: genericIssuer, trust: ss,
				want: `was signed by subject "alice@example.com" with issuer "https://evil.test.invalid"`},
			{name: "url prefix of another owner", id: verifytest.Identity{Subject: "https://github.com/acme-evil/policies/.github/workflows/x.yml@refs/heads/main", Issuer: verify.GitHubActionsIssuer},
				signer: ss, doc: genericIssuerPrefix, trust: ss, want: `was signed by subject "https://github.com/acme-evil/`},
			{name: "github action of another repo", id: verifytest.Identity{Subject: "https://github.com/acme/other/.github/workflows/x.yml@refs/heads/main", Issuer: verify.GitHubActionsIssuer},
				signer: ss, doc: gitHubAction, trust: ss, want: `was signed by subject "https://github.com/acme/other/`},
			{name: "github action, not its issuer", id: verifytest.Identity{Subject: testWorkflow, Issuer: testIssuer}, signer: ss, doc: gitHubAction, trust: ss,
				want: `with issuer "https://oidc.test.invalid"`},
			{name: "missing annotation", id: alice, signer: ss, doc: genericIssuerAnnotated, trust: ss,
				want: `is trusted, but it has no annotation env (want "prod")`},
			{name: "certificate from another ca", id: alice, signer: otherCA, doc: genericIssuer, trust: ss,
				want: "is not trusted: its certificate was not issued by a certificate authority of the trust root, or not when the signature was logged (failed to verify leaf certificate"},
			{name: "another transparency log", id: alice, signer: elsewhere, doc: genericIssuer, trust: ss,
				want: "is not trusted: its transparency-log entry is not signed by a Rekor log of the trust root, or does not record this signature"},
			{name: "no transparency-log entry", id: unlogged, signer: ss, doc: genericIssuer, trust: ss,
				want: "is not trusted: it has no transparency-log entry: a keyless signature must be recorded in Rekor"},
			{name: "no trust root", id: alice, signer: ss, doc: genericIssuer,
				want: "keyless signatures need a Sigstore trust root (--sigstore-trust-config"},
		} {
			t.Run(layout+"/"+tc.name, func(t *testing.T) {
				name := strings.NewReplacer(" ", "-", ",", "").Replace(layout + "-" + tc.name)
				uri, repo, digest := fx.push(t, name)
				sign(t, tc.signer, repo, digest, tc.id)
				v := keylessVerifier(t, tc.doc, tc.trust)
				res, err := v.Verify(context.Background(), fx.reg.Fetcher(t, nil), uri)
				if tc.want == "" {
					if err != nil {
						t.Fatal(err)
					}
					if res.ManifestDigest != digest || len(res.Satisfied) != 1 || res.Signatures != 1 {
						t.Errorf("got %+v", res)
					}
					m, err := fx.fetchVerified(t, v, uri)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(m.Bytes, verifytest.Wasm(name)) {
						t.Errorf("got module %q", m.Bytes)
					}
					return
				}
				if err == nil {
					t.Fatalf("accepted, want an error with %q", tc.want)
				}
				if !errors.Is(err, verify.ErrNotTrusted) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("got %v, want ErrNotTrusted with %q", err, tc.want)
				}
				t.Logf("refused: %v", err)
				if _, err := fx.fetchVerified(t, v, uri); err == nil {
					t.Error("the fetcher loaded it")
				}
			})
		}
	}
}

// TestKeylessSignatureOfAnotherModule copies a valid keyless signature of
// one module to another (a module swapped after signing): refused, in both
// layouts.
func TestKeylessSignatureOfAnotherModule(t *testing.T) {
	fx := newFixture(t)
	ss := verifytest.NewSigstore(t)
	alice := verifytest.Identity{Subject: "alice@example.com", Issuer: testIssuer}
	v := keylessVerifier(t, genericIssuer, ss)

	_, _, signed := fx.push(t, "signed")
	t.Run("signature image", func(t *testing.T) {
		uri, repo, tampered := fx.push(t, "signed-tampered")
		verifytest.WriteSignatures(t, fx.pub, repo, tampered, ss.KeylessLayer(t, repo, signed, alice))
		_, err := v.Verify(context.Background(), fx.reg.Fetcher(t, nil), uri)
		if err == nil || !strings.Contains(err.Error(), "is trusted, but it signs manifest "+signed+", not "+tampered) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("v3 bundle", func(t *testing.T) {
		uri, repo, digest := fx.push(t, "bundle-tampered")
		verifytest.AttachBundle(t, fx.pub, repo, digest, ss.Bundle(t, signed, alice))
		_, err := v.Verify(context.Background(), fx.reg.Fetcher(t, nil), uri)
		if err == nil || !strings.Contains(err.Error(), "is trusted, but it signs manifest "+signed+", not "+digest) {
			t.Errorf("got %v", err)
		}
	})
}

// TestKeylessTamperedSignature alters a signed payload and a signed
// bundle after signing: Sigstore's checks refuse them.
func TestKeylessTamperedSignature(t *testing.T) {
	fx := newFixture(t)
	ss := verifytest.NewSigstore(t)
	alice := verifytest.Identity{Subject: "alice@example.com", Issuer: testIssuer}
	v := keylessVerifier(t, genericIssuer, ss)
	t.Run("signature image", func(t *testing.T) {
		uri, repo, digest := fx.push(t, "tampered-payload")
		l := ss.KeylessLayer(t, repo, digest, alice)
		l.Payload = bytes.Replace(l.Payload, []byte(`"optional":null`), []byte(`"optional":{"env":"prod"}`), 1)
		verifytest.WriteSignatures(t, fx.pub, repo, digest, l)
		_, err := v.Verify(context.Background(), fx.reg.Fetcher(t, nil), uri)
		if !errors.Is(err, verify.ErrNotTrusted) || !strings.Contains(err.Error(), "signature 1 is not trusted: its transparency-log entry is not signed by a Rekor log of the trust root, or does not record this signature") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("v3 bundle", func(t *testing.T) {
		uri, repo, digest := fx.push(t, "tampered-bundle")
		b := ss.Bundle(t, digest, alice)
		// The statement is base64 in the bundle: swap its predicate for
		// another of the same length.
		b = tamperStatement(t, b)
		verifytest.AttachBundle(t, fx.pub, repo, digest, b)
		_, err := v.Verify(context.Background(), fx.reg.Fetcher(t, nil), uri)
		if !errors.Is(err, verify.ErrNotTrusted) || !strings.Contains(err.Error(), " is not trusted: ") {
			t.Errorf("got %v", err)
		}
		t.Logf("refused: %v", err)
	})
}

// TestKeylessTrustConfigFile reads the trust root from a
// ClientTrustConfig file, as --sigstore-trust-config does, and refuses
// broken ones with the cause.
func TestKeylessTrustConfigFile(t *testing.T) {
	ss := verifytest.NewSigstore(t)
	tr, err := verify.LoadTrustConfig(ss.TrustConfigFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Source() == "" {
		t.Error("no source")
	}
	for _, tc := range []struct{ doc, want string }{
		{`{}`, "mediaType: missing (want application/vnd.dev.sigstore.clienttrustconfig.v0.1+json)"},
		{`{"mediaType":"application/json"}`, `mediaType: unsupported "application/json"`},
		{`not json`, "not JSON"},
		{`{"mediaType":"application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"}`, "trustedRoot: missing"},
		{`{"mediaType":"application/vnd.dev.sigstore.clienttrustconfig.v0.1+json","trustedRoot":{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}}`,
			"trustedRoot.certificateAuthorities: empty"},
	} {
		if _, err := verify.ParseTrustConfig([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// tamperStatement changes the in-toto statement of a bundle after it was
// signed.
func tamperStatement(t *testing.T, bundleJSON []byte) []byte {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal(bundleJSON, &b); err != nil {
		t.Fatal(err)
	}
	env := b["dsseEnvelope"].(map[string]any)
	payload, err := base64.StdEncoding.DecodeString(env["payload"].(string))
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Replace(payload, []byte(`"predicate":{}`), []byte(`"predicate":{"x":1}`), 1)
	if bytes.Equal(changed, payload) {
		t.Fatalf("no predicate in %s", payload)
	}
	env["payload"] = base64.StdEncoding.EncodeToString(changed)
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCertificateRekorBundle checks requireRekorBundle against a trust
// root: the signature made with the certificate's key must come with a
// Rekor bundle that a log of the trust root signed and that records it.
func TestCertificateRekorBundle(t *testing.T) {
	fx := newFixture(t)
	ss := verifytest.NewSigstore(t)
	elsewhere := verifytest.NewSigstore(t)
	signer := verifytest.NewCodeSigner(t)
	doc := "apiVersion: v1\nallOf:\n- kind: certificate\n  requireRekorBundle: true\n  certificate: " + quoted(string(signer.CertPEM)) + "\n"
	for _, tc := range []struct {
		name string
		log  *verifytest.Sigstore // records the signature; nil: no bundle
		want string
	}{
		{name: "logged", log: ss},
		{name: "no bundle", want: "no signature that verifies with the certificate's key has a Rekor bundle"},
		{name: "another log", log: elsewhere, want: "signature 1: its Rekor bundle does not verify: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uri, repo, digest := fx.push(t, "rekor-"+strings.ReplaceAll(tc.name, " ", "-"))
			payload := verifytest.Payload(repo, digest, nil)
			sig := signer.Key.SignBytes(t, payload)
			l := verifytest.Layer{Payload: payload, Signature: sig, Annotations: map[string]string{verify.AnnotationCertificate: string(signer.CertPEM)}}
			if tc.log != nil {
				l.Annotations[verify.AnnotationBundle] = tc.log.RekorBundle(t, payload, sig, signer.CertPEM)
			}
			verifytest.WriteSignatures(t, fx.pub, repo, digest, l)
			_, err := keylessVerifier(t, doc, ss).Verify(context.Background(), fx.reg.Fetcher(t, nil), uri)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, verify.ErrNotTrusted) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrNotTrusted with %q", err, tc.want)
			}
		})
	}
}

// TestKeylessNotSigned checks the error of a module with neither a
// signature image nor a Sigstore bundle.
func TestKeylessNotSigned(t *testing.T) {
	fx := newFixture(t)
	uri, _, _ := fx.push(t, "keyless-unsigned")
	_, err := keylessVerifier(t, genericIssuer, verifytest.NewSigstore(t)).Verify(context.Background(), fx.reg.Fetcher(t, nil), uri)
	if !errors.Is(err, verify.ErrNotSigned) || !strings.HasSuffix(err.Error(), ".sig and no Sigstore bundle refers to it") {
		t.Errorf("got %v, want ErrNotSigned naming both layouts", err)
	}
}

// TestKeyBundles checks pubKey requirements against Sigstore v0.3 bundles
// signed with a key, as cosign v3 sign --key attaches them.
func TestKeyBundles(t *testing.T) {
	fx := newFixture(t)
	key, other := verifytest.NewKey(t), verifytest.NewEd25519Key(t)
	_, _, elsewhere := fx.push(t, "key-bundle-elsewhere")
	annotated := func(k *verifytest.Key) string {
		return pubKeys(k) + "  annotations: {env: prod}\n"
	}
	for _, tc := range []struct {
		name        string
		signer      *verifytest.Key
		annotations map[string]string
		signs       string // another manifest, when set
		doc         string
		want        string // "" when accepted
	}{
		{name: "ecdsa", signer: key, doc: pubKeys(key)},
		{name: "ed25519", signer: other, doc: pubKeys(other)},
		{name: "annotations", signer: key, annotations: map[string]string{"env": "prod"}, doc: annotated(key)},
		{name: "another key", signer: other, doc: pubKeys(key), want: "allOf[0] (pubKey): its signature does not verify with this key"},
		{name: "missing annotation", signer: key, doc: annotated(key), want: `verifies, but it has no annotation env (want "prod")`},
		{name: "another manifest", signer: key, signs: elsewhere, doc: pubKeys(key), want: "verifies, but it signs manifest " + elsewhere},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uri, repo, digest := fx.push(t, "key-bundle-"+strings.ReplaceAll(tc.name, " ", "-"))
			signs := digest
			if tc.signs != "" {
				signs = tc.signs
			}
			verifytest.AttachBundle(t, fx.pub, repo, digest, verifytest.KeyBundle(t, tc.signer, signs, tc.annotations))
			m, err := fx.fetchVerified(t, verifier(t, tc.doc), uri)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(m.Bytes, verifytest.Wasm("key-bundle-"+tc.name)) {
					t.Errorf("got module %q", m.Bytes)
				}
				return
			}
			if !errors.Is(err, verify.ErrNotTrusted) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrNotTrusted with %q", err, tc.want)
			}
		})
	}
	t.Run("tampered", func(t *testing.T) {
		uri, repo, digest := fx.push(t, "key-bundle-tampered")
		verifytest.AttachBundle(t, fx.pub, repo, digest, tamperStatement(t, verifytest.KeyBundle(t, key, digest, nil)))
		_, err := fx.fetchVerified(t, verifier(t, pubKeys(key)), uri)
		if !errors.Is(err, verify.ErrNotTrusted) || !strings.Contains(err.Error(), "its signature does not verify with this key") {
			t.Errorf("got %v", err)
		}
	})
}
