package policyserver_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// signedRegistry is a TLS registry holding the labels policy twice:
// policies/signed:v1, signed with key, and policies/unsigned:v1.
type signedRegistry struct {
	reg               *verifytest.Registry
	key               *verifytest.Key
	signed, unsigned  string // module URIs
	sources           string // sources.yml trusting the registry
	verification      string // verification.yml requiring key
	unsignedSignature string // where the unsigned module's signature would be
}

func newSignedRegistry(t *testing.T) *signedRegistry {
	t.Helper()
	wasm, err := os.ReadFile(policybuild.ForTest(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	reg := verifytest.StartRegistry(t)
	pub := reg.Fetcher(t, nil)
	sr := &signedRegistry{
		reg:      reg,
		key:      verifytest.NewKey(t),
		signed:   "registry://" + reg.Host + "/policies/signed:v1",
		unsigned: "registry://" + reg.Host + "/policies/unsigned:v1",
		sources:  reg.SourcesFile(t),
	}
	verifytest.Push(t, pub, sr.signed, wasm)
	verifytest.Sign(t, pub, sr.signed, sr.key, map[string]string{"env": "prod"})
	// The same module, so the same manifest digest, in another repository:
	// the signature next to the other one does not count.
	d := verifytest.Push(t, pub, sr.unsigned, wasm)
	tag, _ := verify.SignatureTag(d)
	sr.unsignedSignature = reg.Host + "/policies/unsigned:" + tag
	key, _ := json.Marshal(sr.key.PublicPEM)
	sr.verification = writeFile(t, "verification.yml", "apiVersion: v1\nallOf:\n  - kind: pubKey\n    owner: platform\n    key: "+string(key)+"\n    annotations:\n      env: prod\n")
	return sr
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// options returns server options for policies, with the registry's
// sources.yml and a fresh download dir.
func (sr *signedRegistry) options(t *testing.T, policies string) policyserver.Options {
	opts := testOptions(t, writePolicies(t, policies))
	opts.SourcesPath = sr.sources
	opts.DownloadDir = t.TempDir()
	return opts
}

func TestVerificationLoadsSignedModule(t *testing.T) {
	sr := newSignedRegistry(t)
	opts := sr.options(t, "labels: {module: "+sr.signed+", settings: {denied_labels: [forbidden]}}\n")
	opts.VerificationPath = sr.verification
	opts.SigstoreTrust = verifytest.NewSigstore(t).TrustConfigFile(t) // key-based signatures do not need it
	ts := startServer(t, opts)
	if resp := ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithUID("u1"), admissiontest.WithLabels(map[string]string{"forbidden": "x"})).JSON()); resp.Allowed {
		t.Error("the signed policy accepted a forbidden label")
	}
	if resp := ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithUID("u2"), admissiontest.WithLabels(map[string]string{"fine": "x"})).JSON()); !resp.Allowed {
		t.Errorf("the signed policy rejected a fine pod: %+v", resp.Status)
	}
}

func TestVerificationRefusesToStart(t *testing.T) {
	sr := newSignedRegistry(t)
	otherKey, _ := json.Marshal(verifytest.NewKey(t).PublicPEM)
	tests := []struct {
		name, policies, verification, want string
	}{
		{
			name:     "unsigned module",
			policies: "labels: {module: " + sr.unsigned + "}",
			want:     `policy "labels": fetching ` + sr.unsigned + ": the module is not signed: no signature at " + sr.unsignedSignature,
		},
		{
			name:         "signed by another key",
			policies:     "labels: {module: " + sr.signed + "}",
			verification: "allOf: [{kind: pubKey, key: " + string(otherKey) + "}]",
			want:         `policy "labels": fetching ` + sr.signed + ": signature verification failed: allOf[0] (pubKey): its signature does not verify with this key (signed with another key, or altered)",
		},
		{
			name:     "file module",
			policies: "labels: {module: {labels}}",
			want:     ": signature verification is on, and only registry:// modules carry signatures",
		},
		{
			name:         "malformed verification.yml",
			policies:     "labels: {module: " + sr.signed + "}",
			verification: "apiVersion: v1\nallOf:\n  - kind: pubkey\n    key: x\n",
			want:         `verification.yml: allOf[0].kind: unknown kind "pubkey" (want pubKey, genericIssuer or githubAction; Warden also knows certificate)`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := sr.options(t, tc.policies)
			opts.VerificationPath = sr.verification
			if tc.verification != "" {
				opts.VerificationPath = writeFile(t, "verification.yml", tc.verification)
			}
			err := startFailure(t, opts)
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error = %v\nwant it to contain %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(filepath.Join(opts.DownloadDir, "registry")); len(entries) > 0 {
				t.Errorf("the download dir holds %v", entries)
			}
		})
	}
}

func TestVerificationContinueOnErrors(t *testing.T) {
	sr := newSignedRegistry(t)
	opts := sr.options(t, "signed: {module: "+sr.signed+", settings: {denied_labels: [forbidden]}}\n"+
		"unsigned: {module: "+sr.unsigned+", settings: {denied_labels: [forbidden]}}\n")
	opts.VerificationPath = sr.verification
	opts.ContinueOnErrors = true
	ts := startServer(t, opts)
	resp := ts.review(t, "/validate/unsigned", admissiontest.New(admissiontest.WithUID("u1")).JSON())
	want := "fetching " + sr.unsigned + ": the module is not signed: no signature at " + sr.unsignedSignature + " and no Sigstore bundle refers to it"
	if resp.Allowed || resp.Status == nil || resp.Status.Code != 500 || resp.Status.Message != want {
		t.Errorf("the unsigned policy answered %+v %+v, want code 500 and %q", resp, resp.Status, want)
	}
	if resp := ts.review(t, "/validate/signed", admissiontest.New(admissiontest.WithUID("u2"), admissiontest.WithLabels(map[string]string{"forbidden": "x"})).JSON()); resp.Allowed {
		t.Error("the signed policy accepted a forbidden label")
	}
	if resp := ts.review(t, "/validate/signed", admissiontest.New(admissiontest.WithUID("u3")).JSON()); !resp.Allowed {
		t.Errorf("the signed policy rejected a fine pod: %+v", resp.Status)
	}
}
