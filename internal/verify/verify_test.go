package verify_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// fixture is a registry with a publisher (a Fetcher without verification)
// and a module pushed at <host>/policies/<name>:v1.
type fixture struct {
	reg *verifytest.Registry
	pub *policyfetch.Fetcher
}

func newFixture(t *testing.T) *fixture {
	reg := verifytest.StartRegistry(t)
	return &fixture{reg: reg, pub: reg.Fetcher(t, nil)}
}

// push publishes a module and returns its URI, repository and manifest
// digest.
func (fx *fixture) push(t *testing.T, name string) (uri, repo, digest string) {
	t.Helper()
	repo = fx.reg.Host + "/policies/" + name
	uri = "registry://" + repo + ":v1"
	digest = verifytest.Push(t, fx.pub, uri, verifytest.Wasm(name))
	return uri, repo, digest
}

// verifier parses a verification.yml and returns its Verifier.
func verifier(t *testing.T, doc string) *verify.Verifier {
	t.Helper()
	c, err := verify.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	v, err := verify.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pubKeys is a verification.yml with one pubKey per key in allOf.
func pubKeys(keys ...*verifytest.Key) string {
	doc := "apiVersion: v1\nallOf:\n"
	for _, k := range keys {
		doc += "- kind: pubKey\n  key: " + quoted(k.PublicPEM) + "\n"
	}
	return doc
}

// fetchVerified fetches uri with a Fetcher whose Verifier is v, and checks
// that a failure leaves the store empty.
func (fx *fixture) fetchVerified(t *testing.T, v *verify.Verifier, uri string) (policyfetch.Module, error) {
	t.Helper()
	store := t.TempDir()
	f, err := policyfetch.New(policyfetch.Options{StoreDir: store, Sources: fx.reg.Sources(), Verifier: v,
		DockerConfigPath: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := f.Fetch(context.Background(), uri)
	if err != nil {
		var files []string
		_ = filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, p)
			}
			return nil
		})
		if len(files) > 0 {
			t.Errorf("a refused module left %v in the store", files)
		}
	}
	return m, err
}

func TestSignedModuleVerifiesAndLoads(t *testing.T) {
	fx := newFixture(t)
	for _, tc := range []struct {
		name string
		key  *verifytest.Key
	}{
		{"ecdsa p-256", verifytest.NewKey(t)},
		{"rsa 2048", verifytest.NewRSAKey(t)},
		{"ed25519", verifytest.NewEd25519Key(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			uri, _, _ := fx.push(t, name)
			verifytest.Sign(t, fx.pub, uri, tc.key, nil)
			m, err := fx.fetchVerified(t, verifier(t, pubKeys(tc.key)), uri)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Bytes, verifytest.Wasm(name)) {
				t.Errorf("got %q", m.Bytes)
			}
			if b, err := os.ReadFile(m.Path); err != nil || !bytes.Equal(b, m.Bytes) {
				t.Errorf("store file %s: %q, %v", m.Path, b, err)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	fx := newFixture(t)
	alice, mallory := verifytest.NewKey(t), verifytest.NewKey(t)
	aliceOnly := pubKeys(alice)
	ctx := context.Background()

	type module struct{ uri, repo, digest string }
	pushed := func(t *testing.T, name string) module {
		uri, repo, digest := fx.push(t, name)
		return module{uri, repo, digest}
	}

	tests := []struct {
		name   string
		config string
		// prepare signs (or not) the module and returns what the error must
		// contain, given the module.
		prepare func(t *testing.T, m module) string
		is      error
	}{
		{
			name: "unsigned", config: aliceOnly, is: verify.ErrNotSigned,
			prepare: func(t *testing.T, m module) string {
				tag, _ := verify.SignatureTag(m.digest)
				return "fetching " + m.uri + ": the module is not signed: no signature at " + m.repo + ":" + tag
			},
		},
		{
			name: "signed by another key", config: aliceOnly, is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				verifytest.Sign(t, fx.pub, m.uri, mallory, nil)
				return "fetching " + m.uri + ": signature verification failed: allOf[0] (pubKey): its signature does not verify with this key (signed with another key, or altered)"
			},
		},
		{
			name: "payload altered after signing", config: aliceOnly, is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				p := verifytest.Payload(m.repo, m.digest, map[string]string{"env": "dev"})
				sig := alice.SignBytes(t, p)
				altered := bytes.Replace(p, []byte(`"dev"`), []byte(`"prd"`), 1)
				verifytest.WriteSignatures(t, fx.pub, m.repo, m.digest, verifytest.Layer{Payload: altered, Signature: sig})
				return "allOf[0] (pubKey): its signature does not verify with this key (signed with another key, or altered)"
			},
		},
		{
			name: "signature of another manifest", config: aliceOnly, is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				other := pushed(t, "other-manifest")
				p := verifytest.Payload(m.repo, other.digest, nil)
				verifytest.WriteSignatures(t, fx.pub, m.repo, m.digest, verifytest.Layer{Payload: p, Signature: alice.SignBytes(t, p)})
				return fmt.Sprintf("allOf[0] (pubKey): signature 1 verifies, but it signs manifest %s, not %s", other.digest, m.digest)
			},
		},
		{
			name: "signature copied from another module", config: aliceOnly, is: verify.ErrNotSigned,
			prepare: func(t *testing.T, m module) string {
				// A real signature of another module is no signature of this one.
				other := pushed(t, "copied-from")
				verifytest.Sign(t, fx.pub, other.uri, alice, nil)
				return "the module is not signed: no signature at "
			},
		},
		{
			name: "required annotation missing", config: "allOf:\n- kind: pubKey\n  key: " + quoted(alice.PublicPEM) + "\n  annotations: {env: prod}\n", is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				verifytest.Sign(t, fx.pub, m.uri, alice, map[string]string{"team": "platform"})
				return `allOf[0] (pubKey): signature 1 verifies, but it has no annotation env (want "prod")`
			},
		},
		{
			name: "required annotation different", config: "allOf:\n- kind: pubKey\n  key: " + quoted(alice.PublicPEM) + "\n  annotations: {env: prod}\n", is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				verifytest.Sign(t, fx.pub, m.uri, alice, map[string]string{"env": "dev"})
				return `allOf[0] (pubKey): signature 1 verifies, but its annotation env is "dev", not "prod"`
			},
		},
		{
			name: "annotation that is not a string", config: "allOf:\n- kind: pubKey\n  key: " + quoted(alice.PublicPEM) + "\n  annotations: {replicas: '3'}\n", is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				p := []byte(strings.Replace(string(verifytest.Payload(m.repo, m.digest, nil)), `"optional":null`, `"optional":{"replicas":3}`, 1))
				verifytest.WriteSignatures(t, fx.pub, m.repo, m.digest, verifytest.Layer{Payload: p, Signature: alice.SignBytes(t, p)})
				return `signature 1 verifies, but its annotation replicas is 3, not "3"`
			},
		},
		{
			name: "signature annotation removed", config: aliceOnly, is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				verifytest.WriteSignatures(t, fx.pub, m.repo, m.digest, verifytest.Layer{Payload: verifytest.Payload(m.repo, m.digest, nil)})
				return "its signature does not verify with this key"
			},
		},
		{
			name: "payload of another type", config: aliceOnly, is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				p := bytes.Replace(verifytest.Payload(m.repo, m.digest, nil), []byte("cosign container image signature"), []byte("atomic container signature"), 1)
				verifytest.WriteSignatures(t, fx.pub, m.repo, m.digest, verifytest.Layer{Payload: p, Signature: alice.SignBytes(t, p)})
				return `signature 1 verifies, but its payload type is "atomic container signature", not "cosign container image signature"`
			},
		},
		{
			name: "signature artifact without signature layers", config: aliceOnly, is: verify.ErrNotSigned,
			prepare: func(t *testing.T, m module) string {
				ref := verifytest.WriteSignatures(t, fx.pub, m.repo, m.digest, verifytest.Layer{Payload: []byte("{}"), MediaType: "application/vnd.in-toto+json"})
				return "the module is not signed: " + ref + " holds no cosign signature"
			},
		},
		{
			name: "keyless requirement", config: "allOf:\n- {kind: githubAction, owner: kubewarden}\n", is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				verifytest.Sign(t, fx.pub, m.uri, alice, nil)
				return "signature verification failed: allOf[0] (githubAction, owner kubewarden): keyless signatures need a Sigstore trust root (--sigstore-trust-config, or the PolicyServer's spec.sigstoreTrustConfig), which Warden never fetches"
			},
		},
		{
			name: "one of two allOf keys missing", config: pubKeys(alice, mallory), is: verify.ErrNotTrusted,
			prepare: func(t *testing.T, m module) string {
				verifytest.Sign(t, fx.pub, m.uri, alice, nil)
				return ": signature verification failed: allOf[1] (pubKey): its signature does not verify"
			},
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := pushed(t, fmt.Sprintf("refused%d", i))
			want := tc.prepare(t, m)
			_, err := fx.fetchVerified(t, verifier(t, tc.config), m.uri)
			checkErr(t, err, want)
			if !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v) is false", tc.is)
			}
			// Verify, which wardenctl verify uses, says the same.
			_, err = verifier(t, tc.config).Verify(ctx, fx.pub, m.uri)
			checkErr(t, err, "verifying "+m.uri+": ")
			checkErr(t, err, strings.TrimPrefix(want, "fetching "+m.uri+": "))
		})
	}
}

func TestAnyOfMinimumMatches(t *testing.T) {
	fx := newFixture(t)
	a, b, c := verifytest.NewKey(t), verifytest.NewKey(t), verifytest.NewKey(t)
	uri, _, _ := fx.push(t, "anyof")
	verifytest.Sign(t, fx.pub, uri, a, nil)
	verifytest.Sign(t, fx.pub, uri, b, map[string]string{"env": "prod"})

	anyOf := func(min int, extra string) string {
		return fmt.Sprintf("apiVersion: v1\n%sanyOf:\n  minimumMatches: %d\n  signatures:\n  - {kind: pubKey, owner: a, key: %s}\n  - {kind: pubKey, owner: b, key: %s, annotations: {env: prod}}\n  - {kind: pubKey, owner: c, key: %s}\n  - {kind: genericIssuer, issuer: 'https://github.com/login/oauth', subject: {equal: alice@example.com}}\n",
			extra, min, quoted(a.PublicPEM), quoted(b.PublicPEM), quoted(c.PublicPEM))
	}
	tests := []struct {
		name, config, wantErr string
		satisfied             []string
	}{
		{name: "1 of 4", config: anyOf(1, ""), satisfied: []string{"anyOf.signatures[0] (pubKey, owner a)", "anyOf.signatures[1] (pubKey, owner b)"}},
		{name: "2 of 4", config: anyOf(2, "")},
		{name: "3 of 4", config: anyOf(3, ""), wantErr: "signature verification failed: anyOf: 2 of the minimumMatches 3 met (" +
			"anyOf.signatures[2] (pubKey, owner c): none of its 2 signatures verifies with this key (signed with another key, or altered); " +
			"anyOf.signatures[3] (genericIssuer, issuer https://github.com/login/oauth, subject alice@example.com): keyless signatures need a Sigstore trust root"},
		{name: "allOf and anyOf", config: anyOf(2, "allOf:\n- {kind: pubKey, key: "+quoted(a.PublicPEM)+"}\n")},
		{name: "allOf fails, anyOf holds", config: anyOf(1, "allOf:\n- {kind: pubKey, key: "+quoted(c.PublicPEM)+"}\n"),
			wantErr: "signature verification failed: allOf[0] (pubKey): none of its 2 signatures verifies with this key"},
		{name: "minimumMatches 0 with allOf", config: anyOf(0, "allOf:\n- {kind: pubKey, key: "+quoted(b.PublicPEM)+"}\n")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := verifier(t, tc.config)
			_, err := fx.fetchVerified(t, v, uri)
			if tc.wantErr != "" {
				checkErr(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			res, err := v.Verify(context.Background(), fx.pub, uri)
			if err != nil {
				t.Fatal(err)
			}
			if res.Signatures != 2 {
				t.Errorf("Signatures = %d, want 2", res.Signatures)
			}
			if tc.satisfied != nil && fmt.Sprint(res.Satisfied) != fmt.Sprint(tc.satisfied) {
				t.Errorf("Satisfied = %q, want %q", res.Satisfied, tc.satisfied)
			}
		})
	}
}

func TestCertificate(t *testing.T) {
	fx := newFixture(t)
	signer := verifytest.NewCodeSigner(t)
	otherCA := verifytest.NewCodeSigner(t)
	expired := verifytest.NewCodeSigner(t, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	})
	notCodeSigning := verifytest.NewCodeSigner(t, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	cert := func(s *verifytest.CodeSigner, extra string) string {
		return "apiVersion: v1\nallOf:\n- kind: certificate\n  certificate: " + quoted(string(s.CertPEM)) + "\n" + extra
	}
	tests := []struct {
		name    string
		signer  *verifytest.CodeSigner
		config  string
		wantErr string
	}{
		{name: "trusted as given", signer: signer, config: cert(signer, "")},
		{name: "chained to its CA", signer: signer, config: cert(signer, "  certificateChain: ["+quoted(string(signer.CAPEM))+"]\n  annotations: {env: prod}\n")},
		{name: "another CA", signer: signer, config: cert(signer, "  certificateChain: ["+quoted(string(otherCA.CAPEM))+"]\n"),
			wantErr: "allOf[0] (certificate, subject CN=policy signer): the certificate does not chain to certificateChain: x509: certificate signed by unknown authority"},
		{name: "signed by another key", signer: otherCA, config: cert(signer, ""),
			wantErr: "allOf[0] (certificate, subject CN=policy signer): its signature does not verify with the certificate's key"},
		{name: "expired", signer: expired, config: cert(expired, ""), wantErr: "the certificate expired at "},
		{name: "not for code signing", signer: notCodeSigning, config: cert(notCodeSigning, ""), wantErr: "the certificate is not for code signing (extended key usage)"},
		{name: "rekor bundle required", signer: signer, config: cert(signer, "  requireRekorBundle: true\n"),
			wantErr: "requireRekorBundle needs a Sigstore trust root with Rekor's public key (--sigstore-trust-config, or the PolicyServer's spec.sigstoreTrustConfig)"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			uri, _, _ := fx.push(t, fmt.Sprintf("cert%d", i))
			verifytest.Sign(t, fx.pub, uri, tc.signer.Key, map[string]string{"env": "prod"})
			_, err := fx.fetchVerified(t, verifier(t, tc.config), uri)
			if tc.wantErr != "" {
				checkErr(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNotVerifiable(t *testing.T) {
	fx := newFixture(t)
	key := verifytest.NewKey(t)
	path := filepath.Join(t.TempDir(), "policy.wasm")
	if err := os.WriteFile(path, verifytest.Wasm("local"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := fx.fetchVerified(t, verifier(t, pubKeys(key)), "file://"+path)
	checkErr(t, err, "fetching file://"+path+": signature verification is on, and only registry:// modules carry signatures")

	_, err = verifier(t, pubKeys(key)).Verify(context.Background(), fx.pub, "https://example.com/policy.wasm")
	checkErr(t, err, "verifying https://example.com/policy.wasm: only registry:// modules carry signatures, not https://")
}

func TestRegistryDown(t *testing.T) {
	fx := newFixture(t)
	key := verifytest.NewKey(t)
	down := "registry://127.0.0.1:1/policies/x:v1"
	_, err := fx.fetchVerified(t, verifier(t, pubKeys(key)), down)
	checkErr(t, err, "fetching "+down+": cannot connect to 127.0.0.1:1: connection refused")
	_, err = verifier(t, pubKeys(key)).Verify(context.Background(), fx.pub, down)
	checkErr(t, err, "verifying "+down+": reading 127.0.0.1:1/policies/x:v1: cannot connect to 127.0.0.1:1: connection refused")

	// The registry fails between the manifest and the signatures.
	uri, _, _ := fx.push(t, "flaky")
	flaky := &failSignatures{Verifier: verifier(t, pubKeys(key))}
	f := fx.reg.Fetcher(t, flaky)
	_, err = f.Fetch(context.Background(), uri)
	checkErr(t, err, "fetching "+uri+": reading its signatures: reading 127.0.0.1:1/policies/flaky:sha256-")
	checkErr(t, err, ".sig: cannot connect to 127.0.0.1:1: connection refused")
}

// failSignatures looks for the signatures in a registry that is down.
type failSignatures struct{ *verify.Verifier }

func (v *failSignatures) VerifyModule(ctx context.Context, f *policyfetch.Fetcher, t policyfetch.Target) error {
	t.Repository = "127.0.0.1:1/policies/" + t.Repository[strings.LastIndexByte(t.Repository, '/')+1:]
	return v.Verifier.VerifyModule(ctx, f, t)
}

func TestVerifyResult(t *testing.T) {
	fx := newFixture(t)
	key := verifytest.NewKey(t)
	uri, _, digest := fx.push(t, "result")
	signed := verifytest.Sign(t, fx.pub, uri, key, nil)
	if signed.ManifestDigest != digest || signed.AlreadySigned {
		t.Errorf("Sign = %+v", signed)
	}
	c, err := verify.KeyConfig([]string{key.PublicPEM}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := verify.New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{uri, strings.TrimPrefix(uri, "registry://"), "registry://" + fx.reg.Host + "/policies/result@" + digest} {
		res, err := v.Verify(context.Background(), fx.pub, u)
		if err != nil {
			t.Fatal(err)
		}
		if res.URI != u || res.ManifestDigest != digest || res.Signatures != 1 || fmt.Sprint(res.Satisfied) != "[allOf[0] (pubKey)]" {
			t.Errorf("Verify(%s) = %+v", u, res)
		}
	}
	_, err = verify.KeyConfig(nil, nil)
	checkErr(t, err, "no public key given")
	_, err = verify.KeyConfig([]string{"nope"}, nil)
	checkErr(t, err, "allOf[0].key: not a PEM public key")
}

// TestConcurrentVerification shares one Verifier between goroutines, as
// the policy server's parallel module loading does.
func TestConcurrentVerification(t *testing.T) {
	fx := newFixture(t)
	key := verifytest.NewKey(t)
	v := verifier(t, pubKeys(key))
	f := fx.reg.Fetcher(t, v)
	var uris []string
	for i := range 4 {
		uri, _, _ := fx.push(t, fmt.Sprintf("concurrent%d", i))
		if i%2 == 0 {
			verifytest.Sign(t, fx.pub, uri, key, nil)
		}
		uris = append(uris, uri)
	}
	errs := make(chan error, 2*len(uris))
	for range 2 {
		for _, uri := range uris {
			go func() {
				_, err := f.Fetch(context.Background(), uri)
				errs <- err
			}()
		}
	}
	var failed int
	for range 2 * len(uris) {
		if err := <-errs; err != nil {
			if !errors.Is(err, verify.ErrNotSigned) {
				t.Error(err)
			}
			failed++
		}
	}
	if failed != len(uris) {
		t.Errorf("%d fetches failed, want %d", failed, len(uris))
	}
}
