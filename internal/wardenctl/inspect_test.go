package wardenctl

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// inspectFixture is a registry with the labels policy pushed three times:
// signed twice with keys (by verify.Sign, cosign's layout), signed with a
// certificate (a hand-written artifact with a chain and a Rekor bundle),
// and unsigned.
type inspectFixture struct {
	reg                             *verifytest.Registry
	sources                         string
	keyRepo                         string // host/repo of keySigned
	keySigned, certSigned, unsigned string // registry://... URIs
	keySignatures, certSignatureRef string // host/repo:sha256-<hex>.sig
	keyManifest, certManifest       string // the policies' manifest digests
}

func startInspectFixture(t *testing.T) *inspectFixture {
	t.Helper()
	reg := verifytest.StartRegistry(t)
	f := reg.Fetcher(t, nil)
	module, err := os.ReadFile(policy(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	repo := reg.Host + "/policies/labels"
	fx := &inspectFixture{
		reg:       reg,
		sources:   reg.SourcesFile(t),
		keyRepo:   repo,
		keySigned: "registry://" + repo + ":v1",
		unsigned:  "registry://" + reg.Host + "/policies/unsigned:v1",
	}
	fx.keyManifest = verifytest.Push(t, f, fx.keySigned, module)
	verifytest.Push(t, f, fx.unsigned, module)
	fx.keySignatures = verifytest.Sign(t, f, fx.keySigned, verifytest.NewKey(t), map[string]string{"env": "prod", "team": "platform"}).SignatureRef
	verifytest.Sign(t, f, fx.keySigned, verifytest.NewRSAKey(t), nil)

	certRepo := reg.Host + "/policies/labels-cert"
	fx.certSigned = "registry://" + certRepo + ":v1"
	fx.certManifest = verifytest.Push(t, f, fx.certSigned, module)
	signer := verifytest.NewCodeSigner(t)
	payload := verifytest.Payload(certRepo, fx.certManifest, nil)
	fx.certSignatureRef = verifytest.WriteSignatures(t, f, certRepo, fx.certManifest, verifytest.Layer{
		Payload:   payload,
		Signature: signer.Key.SignBytes(t, payload),
		Annotations: map[string]string{
			verify.AnnotationCertificate: string(signer.CertPEM),
			annotationChain:              string(signer.CAPEM),
			verify.AnnotationBundle:      `{"SignedEntryTimestamp":"","Payload":{"body":"","integratedTime":1700000000,"logIndex":4242,"logID":"x"}}`,
		},
	})
	return fx
}

// TestInspectSignatures runs inspect --show-signatures against a real
// registry: signed policies list their signatures (pretty and YAML), an
// unsigned one says it has none, a file says it is not in a registry, and
// an unreachable registry costs one line after the metadata.
func TestInspectSignatures(t *testing.T) {
	fx := startInspectFixture(t)
	src := []string{"--sources-path", fx.sources}
	sigDigest := `sha256:[0-9a-f]{64}`

	// A policy in the store whose registry is gone: a port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	goneEnv := newEnv(t)
	labels, err := os.ReadFile(policy(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(goneEnv.storeDir(), "registry", gone, "policies"), "labels:v1", string(labels))

	tests := []struct {
		name string
		env  *testEnv // nil: a fresh one
		args []string
		// want are regexps the output must match, in this order;
		// wantNot are substrings it must not contain.
		want    []string
		wantNot []string
	}{
		{
			name: "signed with keys",
			args: append([]string{"inspect", "--show-signatures"}, append(src, fx.keySigned)...),
			want: []string{
				`(?m)^Details$`, `(?m)^Rules$`,
				`(?m)^Signatures\n`,
				`signature artifact: +` + regexp.QuoteMeta(fx.keySignatures) + `\n`,
				`policy manifest: +` + regexp.QuoteMeta(fx.keyManifest) + `\n`,
				"verified: +no: `wardenctl verify` checks",
				`(?m)^Signature 1\n`,
				`digest: +` + sigDigest + `\n`,
				`media type: +application/vnd\.dev\.cosign\.simplesigning\.v1\+json\n`,
				`size: +\d+\n`,
				`signs: +` + regexp.QuoteMeta(fx.keyRepo+"@"+fx.keyManifest) + `\n`,
				`signed annotations: +env=prod, team=platform\n`,
				`certificate: +none \(signed with a key\)\n`,
				`signature: +[A-Za-z0-9+/]+=*\n`,
				`(?m)^Signature 2\n`,
				`signed annotations: +none\n`,
				`certificate: +none \(signed with a key\)\n`,
			},
			wantNot: []string{"Signature 3", "not the policy's manifest", "note:"},
		},
		{
			name: "signed with a certificate",
			args: append([]string{"inspect", "--show-signatures"}, append(src, fx.certSigned)...),
			want: []string{
				`signature artifact: +` + regexp.QuoteMeta(fx.certSignatureRef) + `\n`,
				`(?m)^Signature 1\n`,
				`signed annotations: +none\n`,
				`certificate: +subject "CN=policy signer", identity signer@example\.com, issued by "CN=code signing ca", valid \S+Z to \S+Z\n`,
				`certificate chain: +1 certificate: "CN=code signing ca"\n`,
				`rekor bundle: +log index 4242, integrated 2023-11-14T22:13:20Z\n`,
				`signature: +[A-Za-z0-9+/]+=*\n`,
			},
			wantNot: []string{"Signature 2", "signed with a key"},
		},
		{
			name:    "unsigned",
			args:    append([]string{"inspect", "--show-signatures"}, append(src, fx.unsigned)...),
			want:    []string{`(?m)^Details$`, `\nSignatures\nno Sigstore signatures found \(none at ` + regexp.QuoteMeta(fx.reg.Host) + `/policies/unsigned:sha256-[0-9a-f]{64}\.sig\)\n$`},
			wantNot: []string{"Signature 1"},
		},
		{
			name: "a file",
			args: []string{"inspect", "--show-signatures", policy(t, "labels")},
			want: []string{`(?m)^Details$`, `\nSignatures\nno Sigstore signatures: file://\S+ is not in a registry\n$`},
		},
		{
			name: "registry unreachable",
			env:  goneEnv,
			args: []string{"inspect", "--show-signatures", "registry://" + gone + "/policies/labels:v1"},
			want: []string{
				`(?m)^Details$`, `(?m)^execution mode: +kubewarden-wapc$`, `(?m)^Rules$`,
				// One line, the last.
				`\nSignatures\nsignature information not available: reading ` + regexp.QuoteMeta(gone) + `/policies/labels:v1: [^\n]+\n$`,
			},
		},
		{
			name:    "without --show-signatures",
			args:    append([]string{"inspect"}, append(src, fx.keySigned)...),
			want:    []string{`(?m)^Details$`},
			wantNot: []string{"Signatures", "signature"},
		},
		{
			name: "yaml, signed",
			args: append([]string{"inspect", "-o", "yaml", "--show-signatures"}, append(src, fx.keySigned)...),
			want: []string{
				`^protocolVersion: v1\n`,
				`\nsignatures:\n  schemaVersion: 2\n  mediaType: application/vnd\.oci\.image\.manifest\.v1\+json\n`,
				`\n  layers:\n    - mediaType: application/vnd\.dev\.cosign\.simplesigning\.v1\+json\n`,
				`dev\.cosignproject\.cosign/signature: `,
			},
		},
		{
			name:    "yaml, unsigned",
			args:    append([]string{"inspect", "-o", "yaml", "--show-signatures"}, append(src, fx.unsigned)...),
			want:    []string{`^protocolVersion: v1\n`, `\n# no Sigstore signatures found \(none at \S+\.sig\)\nsignatures: null\n$`},
			wantNot: []string{"layers"},
		},
		{
			name: "yaml, registry unreachable",
			env:  goneEnv,
			args: []string{"inspect", "-o", "yaml", "--show-signatures", "registry://" + gone + "/policies/labels:v1"},
			want: []string{`^protocolVersion: v1\n`, `\n# signature information not available: reading [^\n]+\n$`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env
			if e == nil {
				e = newEnv(t)
			}
			r := e.mustRun(tc.args...)
			rest := r.stdout
			for _, w := range tc.want {
				loc := regexp.MustCompile(w).FindStringIndex(rest)
				if loc == nil {
					t.Fatalf("output lacks %q (in order)\n%s", w, r.stdout)
				}
				rest = rest[loc[1]:]
			}
			for _, w := range tc.wantNot {
				if strings.Contains(r.stdout, w) {
					t.Errorf("output contains %q\n%s", w, r.stdout)
				}
			}
			if strings.Contains(strings.Join(tc.args, " "), "yaml") {
				var doc map[string]any
				if err := yamlv3.Unmarshal([]byte(r.stdout), &doc); err != nil {
					t.Errorf("not one YAML document: %v\n%s", err, r.stdout)
				}
			}
		})
	}
}

// TestInspectSignaturesOfAMovedTag: the store holds the module a tag named
// when it was pulled; the tag now names another one, whose signatures
// inspect shows with a note.
func TestInspectSignaturesOfAMovedTag(t *testing.T) {
	reg := verifytest.StartRegistry(t)
	f := reg.Fetcher(t, nil)
	sources := reg.SourcesFile(t)
	uri := "registry://" + reg.Host + "/policies/labels:v1"
	module, err := os.ReadFile(policy(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	verifytest.Push(t, f, uri, module)
	e := newEnv(t)
	e.mustRun("pull", "--sources-path", sources, uri)

	other, err := os.ReadFile(annotatedLabels(t))
	if err != nil {
		t.Fatal(err)
	}
	verifytest.Push(t, f, uri, other)
	verifytest.Sign(t, f, uri, verifytest.NewKey(t), nil)

	r := e.mustRun("inspect", "--show-signatures", "--sources-path", sources, uri)
	for _, want := range []string{
		`(?m)^sha256: +` + sha256Hex(module) + `$`, // the metadata is the stored module's
		`(?m)^note: +the registry's manifest now names module sha256:` + sha256Hex(other) + `, not the inspected one: these are its signatures$`,
		`(?m)^Signature 1$`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("output lacks %q\n%s", want, r.stdout)
		}
	}
}

func TestDescribeCertificates(t *testing.T) {
	signer := verifytest.NewCodeSigner(t, func(c *x509.Certificate) { c.EmailAddresses = nil })
	tests := []struct {
		name, pem string
		chain     bool
		want      string // regexp
	}{
		{name: "no identity", pem: string(signer.CertPEM), want: `^subject "CN=policy signer", issued by "CN=code signing ca", valid \S+ to \S+$`},
		{name: "chain of two", pem: string(signer.CAPEM) + string(signer.CertPEM), chain: true, want: `^2 certificates: "CN=code signing ca", "CN=policy signer"$`},
		{name: "not PEM", pem: "garbage", want: `^unreadable: no PEM CERTIFICATE block$`},
		{name: "bad DER", pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", want: `^unreadable: `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeCertificates(tc.pem, tc.chain); !regexp.MustCompile(tc.want).MatchString(got) {
				t.Errorf("describeCertificates = %q, want %q", got, tc.want)
			}
		})
	}
}
