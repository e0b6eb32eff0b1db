package verify_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// quoted returns s as a YAML (JSON) double-quoted scalar.
func quoted(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestParseConfig(t *testing.T) {
	alice, bob := verifytest.NewKey(t), verifytest.NewRSAKey(t)
	// What kwctl scaffold verification-config writes, keys filled in.
	scaffold := `apiVersion: v1
allOf:
  - kind: githubAction
    owner: kubewarden   # mandatory
    annotations:
      env: prod
anyOf: # at least anyOf.minimumMatches are required to match
  minimumMatches: 2 # default is 1
  signatures:
  - kind: pubKey
    owner: alice # optional
    key: ` + quoted(alice.PublicPEM) + `
    annotations:  # optional
      env: prod
      foo: bar
  - kind: pubKey
    key: |
` + indent(bob.PublicPEM, "      ") + `
  - kind: genericIssuer
    issuer: https://github.com/login/oauth
    subject:
      equal: alice@example.com
  - kind: genericIssuer
    issuer: https://token.actions.githubusercontent.com
    subject:
      urlPrefix: https://github.com/kubewarden # gets a trailing /
  - kind: githubAction
    owner: flavio
    repo: policy1
`
	c, err := verify.ParseConfig([]byte(scaffold))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.AllOf) != 1 || c.AllOf[0].Kind != verify.KindGitHubAction || c.AllOf[0].Owner != "kubewarden" ||
		!reflect.DeepEqual(c.AllOf[0].Annotations, map[string]string{"env": "prod"}) {
		t.Errorf("allOf = %+v", c.AllOf)
	}
	if c.AnyOf == nil || c.AnyOf.MinimumMatches != 2 || len(c.AnyOf.Signatures) != 5 {
		t.Fatalf("anyOf = %+v", c.AnyOf)
	}
	s := c.AnyOf.Signatures
	if s[0].Kind != verify.KindPubKey || s[0].Owner != "alice" || s[0].Key != alice.PublicPEM || s[0].Annotations["foo"] != "bar" {
		t.Errorf("anyOf.signatures[0] = %+v", s[0])
	}
	if s[2].Subject == nil || s[2].Subject.Equal != "alice@example.com" || s[2].Issuer != "https://github.com/login/oauth" {
		t.Errorf("anyOf.signatures[2] = %+v", s[2])
	}
	if s[3].Subject == nil || s[3].Subject.URLPrefix != "https://github.com/kubewarden/" {
		t.Errorf("urlPrefix = %+v, want https://github.com/kubewarden/", s[3].Subject)
	}
	if s[4].Owner != "flavio" || s[4].Repo != "policy1" {
		t.Errorf("anyOf.signatures[4] = %+v", s[4])
	}
	if got := c.Keyless(); len(got) != 4 || got[0] != "allOf[0] (githubAction, owner kubewarden)" {
		t.Errorf("Keyless() = %q", got)
	}

	// Forms Kubewarden accepts too.
	for _, tc := range []struct{ name, doc string }{
		{"minimumMatches defaults to 1", "apiVersion: v1\nanyOf:\n  signatures:\n  - {kind: pubKey, key: " + quoted(alice.PublicPEM) + "}\n"},
		{"no apiVersion", "allOf:\n- {kind: pubKey, key: " + quoted(alice.PublicPEM) + "}\n"},
		{"JSON", `{"apiVersion":"v1","allOf":[{"kind":"pubKey","key":` + quoted(alice.PublicPEM) + `}]}`},
		{"certificate (Warden)", "apiVersion: v1\nallOf:\n- kind: certificate\n  certificate: " + quoted(string(verifytest.NewCodeSigner(t).CertPEM)) + "\n  requireRekorBundle: false\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := verify.ParseConfig([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if c.AnyOf != nil && c.AnyOf.MinimumMatches != 1 {
				t.Errorf("minimumMatches = %d", c.AnyOf.MinimumMatches)
			}
		})
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n")
}

func TestParseConfigErrors(t *testing.T) {
	key := quoted(verifytest.NewKey(t).PublicPEM)
	tests := []struct{ name, doc, want string }{
		{"empty", "", "the file is empty"},
		{"not YAML", "allOf: [", "not valid YAML: "},
		{"a list", "- kind: pubKey", "want a mapping with apiVersion, allOf and anyOf, not a list"},
		{"unsupported version", "apiVersion: v2\nallOf: []", `apiVersion: unsupported version "v2" (want v1)`},
		{"unknown top-level field", "apiVersion: v1\nallof: []", "allof: unknown field (want apiVersion, allOf, anyOf)"},
		{"nothing required", "apiVersion: v1", "neither allOf nor anyOf is set: list the signatures a module needs"},
		{"empty allOf", "apiVersion: v1\nallOf: []", "no signature is required: list signatures in allOf, or in anyOf with a minimumMatches of at least 1"},
		{"allOf not a list", "allOf: {kind: pubKey}", "allOf: want a list of signatures, not a mapping"},
		{"unknown kind", "allOf:\n- kind: keyless\n  issuer: x", `allOf[0].kind: unknown kind "keyless" (want pubKey, genericIssuer or githubAction; Warden also knows certificate)`},
		{"no kind", "allOf:\n- key: " + key, "allOf[0].kind: missing (want pubKey, genericIssuer or githubAction)"},
		{"unknown field of a kind", "allOf:\n- kind: pubKey\n  key: " + key + "\n  issuer: x", "allOf[0].issuer: unknown field for kind pubKey (want kind, owner, key, annotations)"},
		{"missing key", "allOf:\n- kind: pubKey\n  owner: alice", "allOf[0].key: missing"},
		{"key not PEM", "allOf:\n- kind: pubKey\n  key: not a key", "allOf[0].key: not a PEM public key: "},
		{"private key instead of public", "allOf:\n- kind: pubKey\n  key: " + quoted(privatePEM(t)), "allOf[0].key: not a PEM public key: "},
		{"annotation not a string", "allOf:\n- kind: pubKey\n  key: " + key + "\n  annotations: {replicas: 3}", "allOf[0].annotations.replicas: want a string, not a number (quote it)"},
		{"genericIssuer without subject", "anyOf:\n  signatures:\n  - {kind: genericIssuer, issuer: https://x}", "anyOf.signatures[0].subject: missing (want equal or urlPrefix)"},
		{"subject with both", "allOf:\n- {kind: genericIssuer, issuer: i, subject: {equal: a, urlPrefix: 'https://b'}}", "allOf[0].subject: want a mapping with one key, equal or urlPrefix"},
		{"subject urlPrefix not a URL", "allOf:\n- {kind: genericIssuer, issuer: i, subject: {urlPrefix: github}}", `allOf[0].subject.urlPrefix: "github" is not an absolute URL`},
		{"githubAction without owner", "allOf:\n- {kind: githubAction, repo: r}", "allOf[0].owner: missing"},
		{"anyOf without signatures", "anyOf: {minimumMatches: 1}", "anyOf.signatures: missing"},
		{"minimumMatches too high", "anyOf:\n  minimumMatches: 2\n  signatures:\n  - {kind: pubKey, key: " + key + "}", "anyOf.minimumMatches: 2 is more than the 1 signatures listed, so no module could ever be verified"},
		{"minimumMatches negative", "anyOf:\n  minimumMatches: -1\n  signatures: []", "anyOf.minimumMatches: want a whole number from 0 to 255, not -1"},
		{"anyOf unknown field", "anyOf:\n  minimum: 1\n  signatures: []", "anyOf.minimum: unknown field (want minimumMatches, signatures)"},
		{"certificate not PEM", "allOf:\n- {kind: certificate, certificate: x}", "allOf[0].certificate: no PEM CERTIFICATE block"},
		{"requireRekorBundle not a bool", "allOf:\n- {kind: certificate, certificate: x, requireRekorBundle: yes please}", "allOf[0].requireRekorBundle: want true or false, not a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify.ParseConfig([]byte(tc.doc))
			checkErr(t, err, tc.want)
		})
	}

	t.Run("the file is named", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "verification.yml")
		if err := os.WriteFile(path, []byte("apiVersion: v1\nallOf:\n- kind: pubKey\n  key: nope\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := verify.LoadConfig(path)
		checkErr(t, err, "verification config "+path+": allOf[0].key: not a PEM public key: ")
		_, err = verify.LoadConfig(filepath.Join(t.TempDir(), "missing.yml"))
		checkErr(t, err, "no such file or directory")
	})
}

// checkErr checks that err is one line that contains want.
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	got := err.Error()
	if strings.Contains(got, "\n") {
		t.Errorf("error spans lines: %q", got)
	}
	if !strings.Contains(got, want) {
		t.Errorf("error = %q\n want it to contain %q", got, want)
	}
}

// privatePEM returns a PEM private key.
func privatePEM(t *testing.T) string {
	t.Helper()
	b, err := cryptoutils.MarshalPrivateKeyToPEM(verifytest.NewKey(t).Signer)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConfigBuiltInGo(t *testing.T) {
	key := verifytest.NewKey(t)
	if _, err := verify.New(&verify.Config{AllOf: []verify.Signature{{Kind: verify.KindPubKey, Key: key.PublicPEM}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  *verify.Config
		want string
	}{
		{nil, "verify: no config"},
		{&verify.Config{}, "no signature is required"},
		{&verify.Config{AnyOf: &verify.AnyOf{MinimumMatches: 1, Signatures: []verify.Signature{{Kind: verify.KindPubKey, Key: "x"}}}}, "anyOf.signatures[0].key: not a PEM public key"},
		{&verify.Config{AllOf: []verify.Signature{{Kind: "cosign"}}}, `allOf[0].kind: unknown kind "cosign"`},
		{&verify.Config{AllOf: []verify.Signature{{Kind: verify.KindGenericIssuer, Issuer: "https://x"}}}, "allOf[0].subject: want one of equal or urlPrefix"},
	} {
		_, err := verify.New(tc.cfg)
		checkErr(t, err, tc.want)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nallOf:\n- {kind: githubAction, owner: o, annotations: {a: b}}\n"))
	f.Add([]byte("anyOf: {minimumMatches: 1, signatures: [{kind: genericIssuer, issuer: i, subject: {urlPrefix: 'https://x'}}]}"))
	f.Add([]byte("allOf: [{kind: certificate, certificate: x, certificateChain: [y], requireRekorBundle: true}]"))
	f.Add([]byte(`{"allOf":[{"kind":"pubKey","key":"-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := verify.ParseConfig(data)
		if err == nil {
			if _, err := verify.New(c); err != nil {
				t.Errorf("ParseConfig accepted what New refuses: %v", err)
			}
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("error spans lines: %q", err)
		}
	})
}
