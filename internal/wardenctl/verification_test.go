package wardenctl

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// verifyFixture is a registry holding a signed policy and an unsigned one,
// and the key files of the tests.
type verifyFixture struct {
	reg                  *verifytest.Registry
	sources              string
	signed               string // registry://.../policies/labels:v1, a real policy
	unsigned             string // registry://.../policies/unsigned:v1
	cosignKey, publicKey string
	// plainKey is an unencrypted PKCS#8 key, plainPublic its public key.
	plainKey, plainPublic string
	// otherPublic is a key that signs nothing.
	otherPublic string
}

const cosignPassword = "s3cret"

// newVerifyEnv is an environment with the password of the cosign key.
func newVerifyEnv(t testing.TB) *testEnv {
	e := newEnv(t)
	e.env["COSIGN_PASSWORD"] = cosignPassword
	e.env["OTHER_PASSWORD"] = "wrong"
	return e
}

func startVerifyFixture(t *testing.T) *verifyFixture {
	t.Helper()
	reg := verifytest.StartRegistry(t)
	fx := &verifyFixture{
		reg:      reg,
		sources:  reg.SourcesFile(t),
		signed:   "registry://" + reg.Host + "/policies/labels:v1",
		unsigned: "registry://" + reg.Host + "/policies/unsigned:v1",
	}
	newVerifyEnv(t).mustRun("push", "--sources-path", fx.sources, policy(t, "labels"), fx.signed)
	verifytest.Push(t, reg.Fetcher(t, nil), fx.unsigned, verifytest.Wasm("unsigned"))

	dir := t.TempDir()
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc([]byte(cosignPassword)))
	if err != nil {
		t.Fatal(err)
	}
	fx.cosignKey = write(t, dir, "cosign.key", string(priv))
	fx.publicKey = write(t, dir, "cosign.pub", string(pub))
	fx.otherPublic = write(t, dir, "other.pub", verifytest.NewKey(t).PublicPEM)
	plain := verifytest.NewKey(t)
	fx.plainPublic = write(t, dir, "plain.pub", plain.PublicPEM)
	der, err := x509.MarshalPKCS8PrivateKey(plain.Signer)
	if err != nil {
		t.Fatal(err)
	}
	fx.plainKey = write(t, dir, "plain.key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})))
	return fx
}

// storedFiles lists the regular files of the store.
func storedFiles(t testing.TB, e *testEnv) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(e.storeDir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestSignVerify signs a policy with wardenctl sign, then checks it with
// verify, pull and run and their verification flags. Every case but the
// signing ones runs in a home of its own, so that stores do not mix.
func TestSignVerify(t *testing.T) {
	fx := startVerifyFixture(t)
	src := []string{"--sources-path", fx.sources}
	digest := `sha256:[0-9a-f]{64}`

	// Sign: the policy ends up signed twice (cosign key with env=prod,
	// plain key without annotations).
	signs := []struct {
		name    string
		args    []string
		code    int
		stdout  string // regexp
		wantErr string
	}{
		{name: "no key", args: []string{fx.signed}, code: 2, wantErr: "--key is required"},
		{name: "bad annotation", args: []string{"--key", fx.cosignKey, "-a", "env", fx.signed}, code: 2, wantErr: `-a/--annotations "env": want key=value`},
		{name: "wrong password", args: []string{"--key", fx.cosignKey, "--key-password-env", "OTHER_PASSWORD", fx.signed}, code: 1, wantErr: "loading the private key"},
		{name: "missing key file", args: []string{"--key", filepath.Join(t.TempDir(), "none.key"), fx.signed}, code: 1, wantErr: "reading the signing key"},
		{name: "not pushed", args: []string{"--key", fx.cosignKey, "registry://" + fx.reg.Host + "/policies/nothing:v1"}, code: 1, wantErr: "signing registry://" + fx.reg.Host + "/policies/nothing:v1"},
		{name: "cosign key", args: []string{"--key", fx.cosignKey, "-a", "env=prod", "--annotations", "team=platform", fx.signed},
			stdout: `^` + regexp.QuoteMeta(fx.signed) + ` signed: manifest ` + digest + `, signature in ` + regexp.QuoteMeta(fx.reg.Host) + `/policies/labels:sha256-[0-9a-f]{64}\.sig \(` + digest + `\)\n$`},
		{name: "again", args: []string{"--key", fx.cosignKey, "-a", "env=prod", "-a", "team=platform", fx.signed}, stdout: `already carries this signature`},
		{name: "plain key, no password", args: []string{"--key", fx.plainKey, "--key-password-env", "", fx.signed}, stdout: ` signed: manifest `},
	}
	for _, tc := range signs {
		t.Run("sign/"+tc.name, func(t *testing.T) {
			r := newVerifyEnv(t).run(append(append([]string{"sign"}, src...), tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
				return
			}
			if !regexp.MustCompile(tc.stdout).MatchString(r.stdout) {
				t.Errorf("stdout does not match %q\n%s", tc.stdout, r)
			}
		})
	}

	pubPEM, err := os.ReadFile(fx.publicKey)
	if err != nil {
		t.Fatal(err)
	}
	cfgDir := t.TempDir()
	indent := func(s string) string { return "      " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n      ") }
	config := write(t, cfgDir, "verification.yml", "apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: |\n"+indent(string(pubPEM))+"\n    annotations: {env: prod}\n")
	wrongConfig := write(t, cfgDir, "wrong.yml", "apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: |\n"+indent(string(pubPEM))+"\n    annotations: {env: dev}\n")
	request := requestFile(t, `{"app": "web"}`, false)
	localLabels := policy(t, "labels")
	stored := filepath.Join("registry", fx.reg.Host, "policies", "labels:v1")

	tests := []struct {
		name    string
		args    []string
		code    int
		stdout  string // regexp
		wantErr string
		stored  []string // files of the store after the run, relative to it (nil: none)
	}{
		// verify
		{name: "verify key", args: []string{"verify", "-k", fx.publicKey, fx.signed},
			stdout: `^` + regexp.QuoteMeta(fx.signed) + ` verified: manifest ` + digest + `, 1 signature requirement satisfied\n$`},
		{name: "verify two keys and annotations", args: []string{"verify", "-k", fx.publicKey, "--verification-key", fx.plainPublic, "-a", "env=prod", "--verification-annotation", "team=platform", fx.signed},
			code: 1, wantErr: "has no annotation env"}, // the plain key's signature has no annotations
		{name: "verify two keys", args: []string{"verify", "-k", fx.publicKey, "--verification-key", fx.plainPublic, fx.signed},
			stdout: `, 2 signature requirements satisfied\n$`},
		{name: "verify annotations", args: []string{"verify", "-k", fx.publicKey, "-a", "env=prod", "-a", "team=platform", fx.signed}, stdout: ` verified: `},
		{name: "verify config", args: []string{"verify", "--verification-config-path", config, fx.signed}, stdout: ` verified: `},
		{name: "verify without scheme", args: []string{"verify", "-k", fx.publicKey, strings.TrimPrefix(fx.signed, "registry://")}, stdout: ` verified: `},
		{name: "verify unsigned", args: []string{"verify", "-k", fx.publicKey, fx.unsigned}, code: 1, wantErr: "verifying " + fx.unsigned + ": the module is not signed"},
		{name: "verify wrong key", args: []string{"verify", "-k", fx.publicKey, "-k", fx.otherPublic, fx.signed}, code: 1, wantErr: "signature verification failed"},
		{name: "verify missing annotation", args: []string{"verify", "-k", fx.publicKey, "-a", "region=eu", fx.signed}, code: 1, wantErr: `has no annotation region (want "eu")`},
		{name: "verify different annotation", args: []string{"verify", "-k", fx.publicKey, "-a", "env=dev", fx.signed}, code: 1, wantErr: `its annotation env is "prod", not "dev"`},
		{name: "verify config not met", args: []string{"verify", "--verification-config-path", wrongConfig, fx.signed}, code: 1, wantErr: "signature verification failed"},
		{name: "verify nothing to check", args: []string{"verify", fx.signed}, code: 2, wantErr: "nothing to verify against"},
		{name: "verify annotation without key", args: []string{"verify", "-a", "env=prod", fx.signed}, code: 2, wantErr: "needs at least one -k"},
		{name: "verify key and config", args: []string{"verify", "-k", fx.publicKey, "--verification-config-path", config, fx.signed}, code: 2, wantErr: "cannot be combined"},
		{name: "verify bad annotation", args: []string{"verify", "-k", fx.publicKey, "-a", "=x", fx.signed}, code: 2, wantErr: "want key=value"},
		{name: "verify not a key", args: []string{"verify", "-k", request, fx.signed}, code: 1, wantErr: "verification key " + request},
		{name: "verify missing key file", args: []string{"verify", "-k", filepath.Join(cfgDir, "none.pub"), fx.signed}, code: 1, wantErr: "reading the verification key"},
		{name: "verify missing policy", args: []string{"verify", "-k", fx.publicKey, "registry://" + fx.reg.Host + "/policies/nothing:v1"}, code: 1, wantErr: "verifying registry://" + fx.reg.Host + "/policies/nothing:v1"},

		// pull
		{name: "pull right key", args: []string{"pull", "-k", fx.publicKey, "-a", "env=prod", fx.signed}, stdout: ` pulled to `, stored: []string{stored}},
		{name: "pull config", args: []string{"pull", "--verification-config-path", config, fx.signed}, stdout: ` pulled to `, stored: []string{stored}},
		{name: "pull wrong key", args: []string{"pull", "-k", fx.otherPublic, "-a", "env=prod", fx.signed}, code: 1, wantErr: "signature verification failed"},
		{name: "pull unsigned", args: []string{"pull", "-k", fx.publicKey, fx.unsigned}, code: 1, wantErr: "the module is not signed"},
		{name: "pull missing annotation", args: []string{"pull", "-k", fx.publicKey, "-a", "region=eu", fx.signed}, code: 1, wantErr: "has no annotation region"},
		{name: "pull annotation without key", args: []string{"pull", "-a", "env=prod", fx.signed}, code: 2, wantErr: "needs at least one -k"},
		{name: "pull unverified", args: []string{"pull", fx.unsigned}, stdout: ` pulled to `, stored: []string{filepath.Join("registry", fx.reg.Host, "policies", "unsigned:v1")}},

		// run
		{name: "run right key", args: []string{"run", "-k", fx.publicKey, "-a", "env=prod", "-r", request, "--settings-json", `{"denied_labels":["forbidden"]}`, fx.signed},
			stdout: `"allowed":true`, stored: []string{stored}},
		{name: "run wrong key", args: []string{"run", "-k", fx.otherPublic, "-r", request, fx.signed}, code: 1, wantErr: "signature verification failed"},
		{name: "run unsigned", args: []string{"run", "-k", fx.publicKey, "-r", request, fx.unsigned}, code: 1, wantErr: "the module is not signed"},
		{name: "run local file", args: []string{"run", "-k", fx.publicKey, "-r", request, localLabels}, code: 1, wantErr: "only registry:// modules carry signatures"},
		{name: "run annotation without key", args: []string{"run", "-a", "env=prod", "-r", request, fx.signed}, code: 2, wantErr: "needs at least one -k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newVerifyEnv(t)
			r := e.run(append(append([]string{tc.args[0]}, src...), tc.args[1:]...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
			} else if !regexp.MustCompile(tc.stdout).MatchString(r.stdout) {
				t.Errorf("stdout does not match %q\n%s", tc.stdout, r)
			}
			var got []string
			for _, f := range storedFiles(t, e) {
				rel, _ := filepath.Rel(e.storeDir(), f)
				got = append(got, rel)
			}
			if strings.Join(got, "\n") != strings.Join(tc.stored, "\n") {
				t.Errorf("store holds %q, want %q\n%s", got, tc.stored, r)
			}
		})
	}
}

// pubKeyConfig is a verification.yml requiring a signature by the public
// key in the file at keyPath.
func pubKeyConfig(t testing.TB, keyPath string) string {
	t.Helper()
	b, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return "apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: |\n      " +
		strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n      ") + "\n"
}

// kwctlDefaultConfig is what kwctl scaffold verification-config prints:
// keyless signatures of the kubewarden organization's GitHub Actions.
const kwctlDefaultConfig = "apiVersion: v1\nallOf:\n  - kind: githubAction\n    owner: kubewarden\n"

// TestDefaultVerificationConfig checks that pull, run and verify read
// ~/.config/kubewarden/verification-config.yml when no verification flag is
// given, as kwctl does, and that flags and other commands ignore it.
func TestDefaultVerificationConfig(t *testing.T) {
	fx := startVerifyFixture(t)
	src := []string{"--sources-path", fx.sources}
	newVerifyEnv(t).mustRun(append(append([]string{"sign"}, src...), "--key", fx.cosignKey, fx.signed)...)
	good := pubKeyConfig(t, fx.publicKey)
	other := pubKeyConfig(t, fx.otherPublic)
	goodPath := write(t, t.TempDir(), "good.yml", good)
	request := requestFile(t, `{"app": "web"}`, false)
	const usingDefault = "using the default verification config"

	tests := []struct {
		name       string
		defaultCfg string // content of the default config; "" for none
		xdg        bool   // under $XDG_CONFIG_HOME rather than ~/.config
		args       []string
		code       int
		stdout     string // regexp
		wantErr    string
		logsUse    bool // stderr says the default config is used
	}{
		{name: "pull signed", defaultCfg: good, args: []string{"pull", fx.signed}, stdout: ` pulled to `, logsUse: true},
		{name: "pull unsigned", defaultCfg: good, args: []string{"pull", fx.unsigned}, code: 1, wantErr: "the module is not signed", logsUse: true},
		{name: "pull other key", defaultCfg: other, args: []string{"pull", fx.signed}, code: 1, wantErr: "signature verification failed", logsUse: true},
		{name: "XDG_CONFIG_HOME", defaultCfg: good, xdg: true, args: []string{"pull", fx.unsigned}, code: 1, wantErr: "the module is not signed", logsUse: true},
		{name: "no default", args: []string{"pull", fx.unsigned}, stdout: ` pulled to `},
		{name: "-k wins", defaultCfg: other, args: []string{"pull", "-k", fx.publicKey, fx.signed}, stdout: ` pulled to `},
		{name: "--verification-config-path wins", defaultCfg: other, args: []string{"pull", "--verification-config-path", goodPath, fx.signed}, stdout: ` pulled to `},
		{name: "verify without flags", defaultCfg: good, args: []string{"verify", fx.signed}, stdout: ` verified: manifest `, logsUse: true},
		{name: "verify without flags, other key", defaultCfg: other, args: []string{"verify", fx.signed}, code: 1, wantErr: "signature verification failed", logsUse: true},
		{name: "run signed", defaultCfg: good, args: []string{"run", "-r", request, fx.signed}, stdout: `"allowed":true`, logsUse: true},
		{name: "run local file", defaultCfg: good, args: []string{"run", "-r", request, policy(t, "labels")}, code: 1, wantErr: "only registry:// modules carry signatures", logsUse: true},
		{name: "inspect does not verify", defaultCfg: other, args: []string{"inspect", fx.signed}, stdout: `(?i)title`},
		{name: "kwctl's default is refused", defaultCfg: kwctlDefaultConfig, args: []string{"pull", fx.signed}, code: 1,
			wantErr: "the default verification config %s: allOf[0] requires a keyless signature (kind githubAction), which needs a Sigstore trust root", logsUse: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newVerifyEnv(t)
			dir := filepath.Join(e.home, ".config")
			if tc.xdg {
				dir = filepath.Join(e.home, "xdg")
				e.env["XDG_CONFIG_HOME"] = dir
			}
			path := filepath.Join(dir, "kubewarden", "verification-config.yml")
			if tc.defaultCfg != "" {
				write(t, dir, "kubewarden/verification-config.yml", tc.defaultCfg)
			}
			r := e.run(append(append([]string{tc.args[0]}, src...), tc.args[1:]...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				want := tc.wantErr
				if strings.Contains(want, "%s") {
					want = fmt.Sprintf(want, path)
				}
				checkError(t, r, want)
			} else if !regexp.MustCompile(tc.stdout).MatchString(r.stdout) {
				t.Errorf("stdout does not match %q\n%s", tc.stdout, r)
			}
			if got := strings.Contains(r.stderr, usingDefault) && strings.Contains(r.stderr, path); got != tc.logsUse {
				t.Errorf("stderr says it uses the default config: %v, want %v\n%s", got, tc.logsUse, r)
			}
			if tc.code != 0 && tc.args[0] == "pull" && len(storedFiles(t, e)) != 0 {
				t.Errorf("a refused policy was stored: %q", storedFiles(t, e))
			}
		})
	}
}

// TestVerificationConfigKeyless checks that, without
// --sigstore-trust-config, a config requiring signatures Warden cannot
// verify is refused when it is read, before any download (the registry of
// the policy does not exist), naming the kind and pointing to the trust
// config and to key-based signing; keyless alternatives in anyOf are only
// warned about.
func TestVerificationConfigKeyless(t *testing.T) {
	// The configs are written in JSON, which is YAML too.
	pubKey := fmt.Sprintf(`{"kind": "pubKey", "key": %q}`, verifytest.NewKey(t).PublicPEM)
	const (
		githubAction  = `{"kind": "githubAction", "owner": "kubewarden"}`
		genericIssuer = `{"kind": "genericIssuer", "issuer": "https://token.actions.githubusercontent.com", "subject": {"equal": "alice@example.com"}}`
		advice        = "give --sigstore-trust-config, a Sigstore ClientTrustConfig (Warden never fetches Sigstore's public trust root), or sign policies with a key"
		nowhere       = "registry://127.0.0.1:1/policies/labels:v1"
	)
	allOf := func(sigs ...string) string {
		return `{"apiVersion": "v1", "allOf": [` + strings.Join(sigs, ", ") + `]}`
	}
	anyOf := func(min int, sigs ...string) string {
		return fmt.Sprintf(`{"apiVersion": "v1", "anyOf": {"minimumMatches": %d, "signatures": [%s]}}`, min, strings.Join(sigs, ", "))
	}
	tests := []struct {
		name    string
		config  string
		cmd     string
		wantErr []string // substrings of the error line; nil: no keyless error
		warns   string   // in stderr
	}{
		{name: "githubAction", config: kwctlDefaultConfig, cmd: "pull",
			wantErr: []string{"allOf[0] requires a keyless signature (kind githubAction), which needs a Sigstore trust root", advice}},
		{name: "genericIssuer", config: allOf(genericIssuer), cmd: "verify",
			wantErr: []string{"allOf[0] requires a keyless signature (kind genericIssuer)", advice}},
		{name: "keyless after a key", config: allOf(pubKey, githubAction), cmd: "run",
			wantErr: []string{"allOf[1] requires a keyless signature (kind githubAction)"}},
		{name: "anyOf of keyless only", config: anyOf(1, githubAction, genericIssuer), cmd: "pull",
			wantErr: []string{"anyOf: without a Sigstore trust root, Warden can meet 0 of its signatures, fewer than minimumMatches 1 (anyOf.signatures[0] requires a keyless signature (kind githubAction)", "anyOf.signatures[1] requires a keyless signature (kind genericIssuer)", advice}},
		{name: "anyOf short of keys", config: anyOf(2, pubKey, githubAction), cmd: "pull",
			wantErr: []string{"anyOf: without a Sigstore trust root, Warden can meet 1 of its signatures, fewer than minimumMatches 2"}},
		{name: "anyOf with enough keys", config: anyOf(1, pubKey, githubAction), cmd: "pull",
			warns: "anyOf.signatures[1] requires a keyless signature (kind githubAction)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			cfg := write(t, t.TempDir(), "verification.yml", tc.config)
			args := []string{tc.cmd, "--verification-config-path", cfg}
			if tc.cmd == "run" {
				args = append(args, "-r", requestFile(t, `{"app": "web"}`, false))
			}
			r := e.run(append(args, nowhere)...)
			if r.code != 1 {
				t.Fatalf("exit code %d, want 1\n%s", r.code, r)
			}
			if tc.wantErr == nil {
				checkError(t, r, "127.0.0.1:1") // accepted: the download fails
			}
			for _, want := range tc.wantErr {
				checkError(t, r, "verification config "+cfg+": ")
				checkError(t, r, want)
			}
			if tc.warns != "" && !strings.Contains(r.stderr, tc.warns) {
				t.Errorf("stderr does not warn %q\n%s", tc.warns, r)
			}
		})
	}
}

func TestCheckOffline(t *testing.T) {
	key := verify.Signature{Kind: verify.KindPubKey}
	cert := verify.Signature{Kind: verify.KindCertificate}
	rekor := verify.Signature{Kind: verify.KindCertificate, RequireRekorBundle: true}
	gha := verify.Signature{Kind: verify.KindGitHubAction, Owner: "kubewarden"}
	tests := []struct {
		name    string
		cfg     verify.Config
		ignored []string
		wantErr string
	}{
		{name: "keys", cfg: verify.Config{AllOf: []verify.Signature{key, cert}}},
		{name: "rekor bundle", cfg: verify.Config{AllOf: []verify.Signature{key, rekor}},
			wantErr: "allOf[1] requires a Rekor bundle (kind certificate, requireRekorBundle: true), which needs a Sigstore trust root"},
		{name: "anyOf met without keyless", cfg: verify.Config{AnyOf: &verify.AnyOf{MinimumMatches: 1, Signatures: []verify.Signature{gha, key}}},
			ignored: []string{"anyOf.signatures[0] requires a keyless signature (kind githubAction), which needs a Sigstore trust root: Fulcio's certificate authority and Rekor's key"}},
		{name: "anyOf minimumMatches 0", cfg: verify.Config{AllOf: []verify.Signature{key}, AnyOf: &verify.AnyOf{Signatures: []verify.Signature{gha}}},
			ignored: []string{"anyOf.signatures[0] requires a keyless signature (kind githubAction), which needs a Sigstore trust root: Fulcio's certificate authority and Rekor's key"}},
		{name: "anyOf not met", cfg: verify.Config{AnyOf: &verify.AnyOf{MinimumMatches: 2, Signatures: []verify.Signature{rekor, key}}},
			wantErr: "anyOf: without a Sigstore trust root, Warden can meet 1 of its signatures, fewer than minimumMatches 2 (anyOf.signatures[0] requires a Rekor bundle"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ignored, err := checkOffline(&tc.cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(ignored, "\n") != strings.Join(tc.ignored, "\n") {
				t.Errorf("ignored %q, want %q", ignored, tc.ignored)
			}
		})
	}
}

// TestKeylessVerification signs a policy keylessly with a test Fulcio and
// Rekor, once as cosign v2 does (signature image) and once as cosign v3
// does (a Sigstore bundle attached as a referrer), and checks it with
// verify, pull and run against --sigstore-trust-config, through kwctl's
// keyless flags and a verification.yml.
func TestKeylessVerification(t *testing.T) {
	fx := startVerifyFixture(t)
	ss := verifytest.NewSigstore(t)
	trust := ss.TrustConfigFile(t)
	pub := fx.reg.Fetcher(t, nil)
	const (
		email    = "alice@example.com"
		issuer   = "https://oidc.test.invalid"
		workflow = "https://github.com/acme/policies/.github/workflows/release.yml@refs/tags/v1"
	)
	// labels:v1 carries a signature image, labels:v2 a bundle.
	repo := strings.TrimPrefix(strings.TrimSuffix(fx.signed, ":v1"), "registry://")
	legacy := fx.signed
	man, err := pub.FetchManifest(context.Background(), legacy)
	if err != nil {
		t.Fatal(err)
	}
	digest := man.Digest
	verifytest.WriteSignatures(t, pub, repo, digest,
		ss.KeylessLayer(t, repo, digest, verifytest.Identity{Subject: email, Issuer: issuer, Annotations: map[string]string{"env": "prod"}}),
		ss.KeylessLayer(t, repo, digest, verifytest.Identity{Subject: workflow, Issuer: verify.GitHubActionsIssuer}))
	bundled := "registry://" + repo + ":v2"
	module, err := os.ReadFile(policy(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	bdigest := verifytest.Push(t, pub, bundled, module)
	verifytest.AttachBundle(t, pub, repo, bdigest, ss.Bundle(t, bdigest, verifytest.Identity{Subject: email, Issuer: issuer}))

	cfgDir := t.TempDir()
	config := write(t, cfgDir, "keyless.yml", "apiVersion: v1\nallOf:\n  - kind: githubAction\n    owner: acme\n")
	request := requestFile(t, `{"app": "web"}`, false)
	alice := []string{"--cert-email", email, "--cert-oidc-issuer", issuer}
	tests := []struct {
		name    string
		args    []string
		code    int
		stdout  string // regexp
		wantErr string
	}{
		{name: "verify email", args: append(append([]string{"verify", "--sigstore-trust-config", trust}, alice...), legacy), stdout: ` verified: manifest sha256:`},
		{name: "verify email and annotation", args: append(append([]string{"verify", "--sigstore-trust-config", trust, "-a", "env=prod"}, alice...), legacy), stdout: ` verified: `},
		{name: "verify github owner", args: []string{"verify", "--sigstore-trust-config", trust, "--github-owner", "acme", "--github-repo", "policies", legacy}, stdout: ` verified: `},
		{name: "verify config", args: []string{"verify", "--sigstore-trust-config", trust, "--verification-config-path", config, legacy}, stdout: ` verified: `},
		{name: "verify bundle", args: append(append([]string{"verify", "--sigstore-trust-config", trust}, alice...), bundled), stdout: ` verified: `},
		{name: "verify other repo", args: []string{"verify", "--sigstore-trust-config", trust, "--github-owner", "acme", "--github-repo", "other", legacy},
			code: 1, wantErr: `allOf[0] (githubAction, owner acme, repo other): `},
		{name: "verify other email", args: []string{"verify", "--sigstore-trust-config", trust, "--cert-email", "bob@example.com", "--cert-oidc-issuer", issuer, bundled},
			code: 1, wantErr: `was signed by subject "alice@example.com" with issuer "https://oidc.test.invalid"`},
		{name: "verify no trust config", args: append([]string{"verify"}, append(alice, legacy)...), code: 2, wantErr: "give --sigstore-trust-config"},
		{name: "verify email without issuer", args: []string{"verify", "--sigstore-trust-config", trust, "--cert-email", email, legacy}, code: 2, wantErr: "--cert-email and --cert-oidc-issuer go together"},
		{name: "verify repo without owner", args: []string{"verify", "--sigstore-trust-config", trust, "--github-repo", "policies", legacy}, code: 2, wantErr: "--github-repo needs --github-owner"},
		{name: "verify bad trust config", args: append(append([]string{"verify", "--sigstore-trust-config", config}, alice...), legacy), code: 1, wantErr: "sigstore trust config " + config + ": not JSON"},
		{name: "pull", args: append(append([]string{"pull", "--sigstore-trust-config", trust}, alice...), legacy), stdout: ` pulled to `},
		{name: "pull bundle", args: append(append([]string{"pull", "--sigstore-trust-config", trust}, alice...), bundled), stdout: ` pulled to `},
		{name: "run bundle", args: append(append([]string{"run", "--sigstore-trust-config", trust, "-r", request}, alice...), bundled), stdout: `"allowed":true`},
		{name: "run wrong email", args: append([]string{"run", "--sigstore-trust-config", trust, "-r", request, "--cert-email", "bob@example.com", "--cert-oidc-issuer", issuer}, bundled),
			code: 1, wantErr: "cannot be validated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newVerifyEnv(t).run(append([]string{tc.args[0], "--sources-path", fx.sources}, tc.args[1:]...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
			} else if !regexp.MustCompile(tc.stdout).MatchString(r.stdout) {
				t.Errorf("stdout does not match %q\n%s", tc.stdout, r)
			}
		})
	}
}
