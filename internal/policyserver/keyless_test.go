package policyserver_test

import (
	"os"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// TestVerificationKeyless loads a module signed keylessly, with a test
// Fulcio and Rekor, as cosign v3 signs it (a Sigstore bundle attached as a
// referrer), against the trust root of --sigstore-trust-config, and
// refuses to start when the identity differs or the trust root is missing
// or broken.
func TestVerificationKeyless(t *testing.T) {
	wasm, err := os.ReadFile(policybuild.ForTest(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	reg := verifytest.StartRegistry(t)
	pub := reg.Fetcher(t, nil)
	ss := verifytest.NewSigstore(t)
	uri := "registry://" + reg.Host + "/policies/keyless:v1"
	digest := verifytest.Push(t, pub, uri, wasm)
	verifytest.AttachBundle(t, pub, reg.Host+"/policies/keyless", digest,
		ss.Bundle(t, digest, verifytest.Identity{Subject: "https://github.com/acme/policies/.github/workflows/release.yml@refs/tags/v1", Issuer: "https://token.actions.githubusercontent.com"}))
	options := func(t *testing.T, verification, trust string) policyserver.Options {
		o := testOptions(t, writePolicies(t, "labels: {module: "+uri+", settings: {denied_labels: [forbidden]}}\n"))
		o.SourcesPath = reg.SourcesFile(t)
		o.DownloadDir = t.TempDir()
		o.VerificationPath = writeFile(t, "verification.yml", verification)
		o.SigstoreTrust = trust
		return o
	}
	const acme = "apiVersion: v1\nallOf:\n  - kind: githubAction\n    owner: acme\n    repo: policies\n"

	t.Run("accepted", func(t *testing.T) {
		ts := startServer(t, options(t, acme, ss.TrustConfigFile(t)))
		if resp := ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithLabels(map[string]string{"forbidden": "x"})).JSON()); resp.Allowed {
			t.Error("the verified policy accepted a forbidden label")
		}
	})
	for _, tc := range []struct{ name, verification, trust, want string }{
		{name: "another owner", verification: "apiVersion: v1\nallOf:\n  - kind: githubAction\n    owner: kubewarden\n", trust: ss.TrustConfigFile(t),
			want: `policy "labels": fetching ` + uri + `: signature verification failed: allOf[0] (githubAction, owner kubewarden): bundle sha256:`},
		{name: "another trust root", verification: acme, trust: verifytest.NewSigstore(t).TrustConfigFile(t),
			want: "is not trusted: its transparency-log entry is not signed by a Rekor log of the trust root"},
		{name: "no trust root", verification: acme,
			want: "keyless signatures need a Sigstore trust root (--sigstore-trust-config, or the PolicyServer's spec.sigstoreTrustConfig)"},
		{name: "broken trust config", verification: acme, trust: writeFile(t, "trust.json", `{"mediaType": "x"}`),
			want: `trust.json: mediaType: unsupported "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := startFailure(t, options(t, tc.verification, tc.trust))
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}
