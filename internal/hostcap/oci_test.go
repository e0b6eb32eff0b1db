package hostcap

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// clock is a settable clock for caches.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// call makes one host call through a Host of d and returns the answer or
// "error: <message>".
func call(t *testing.T, d Handler, ns, op string, payload any) string {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := NewHost(d).HostCall(context.Background(), ns, op, b)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(out)
}

// pushImage pushes a one-layer container image (config os linux, this
// architecture) as repo:tag, and as repo:indexTag an index that lists a
// windows image, then it; it returns the digest of the linux image.
func pushImage(t *testing.T, f *policyfetch.Fetcher, repo, tag, indexTag string) string {
	t.Helper()
	linux := pushManifest(t, f, repo, tag, "linux")
	windows := pushManifest(t, f, repo, tag+"-windows", "windows")
	idx, err := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{windows, linux}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.PushManifest(context.Background(), repo+":"+indexTag, ocispec.MediaTypeImageIndex, idx); err != nil {
		t.Fatal(err)
	}
	return linux.Digest.String()
}

// pushManifest pushes an image of an operating system as repo:tag and
// returns its descriptor, with its platform.
func pushManifest(t *testing.T, f *policyfetch.Fetcher, repo, tag, os string) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	config := []byte(`{"architecture":"` + runtime.GOARCH + `","os":"` + os + `","config":{"Env":["PATH=/bin"]}}`)
	layer := []byte("not really a tarball for " + os)
	cdesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageConfig, config)
	ldesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayerGzip, layer)
	for _, b := range []struct {
		d    ocispec.Descriptor
		data []byte
	}{{cdesc, config}, {ldesc, layer}} {
		if err := f.PushBlob(ctx, repo, b.d, b.data); err != nil {
			t.Fatal(err)
		}
	}
	man, err := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cdesc, Layers: []ocispec.Descriptor{ldesc}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.PushManifest(ctx, repo+":"+tag, ocispec.MediaTypeImageManifest, man); err != nil {
		t.Fatal(err)
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, man)
	desc.Platform = &ocispec.Platform{OS: os, Architecture: runtime.GOARCH}
	return desc
}

// TestOCI answers the oci host capabilities from a real registry.
func TestOCI(t *testing.T) {
	reg := verifytest.StartRegistry(t)
	f := reg.Fetcher(t, nil)
	policy := reg.Host + "/policies/a:v1"
	policyDigest := verifytest.Push(t, f, "registry://"+policy, verifytest.Wasm("a"))
	imageDigest := pushImage(t, f, reg.Host+"/app", "1.0", "multi")
	key := verifytest.NewKey(t)
	verifytest.Sign(t, f, "registry://"+policy, key, map[string]string{"env": "prod"})
	signer := verifytest.NewCodeSigner(t)
	signed := reg.Host + "/policies/cert:v1"
	signedDigest := verifytest.Push(t, f, "registry://"+signed, verifytest.Wasm("cert"))
	verifytest.Sign(t, f, "registry://"+signed, signer.Key, nil)
	other := verifytest.NewKey(t)
	d := NewDirect(Options{Registry: f})

	var digestOnly struct{ Digest string }
	if err := json.Unmarshal([]byte(call(t, d, "oci", "v1/manifest_digest", policy)), &digestOnly); err != nil || digestOnly.Digest != policyDigest {
		t.Errorf("manifest_digest: %+v, %v; want %s", digestOnly, err, policyDigest)
	}

	t.Run("manifest", func(t *testing.T) {
		var m ocispec.Manifest
		if err := json.Unmarshal([]byte(call(t, d, "oci", "v1/oci_manifest", policy)), &m); err != nil {
			t.Fatal(err)
		}
		if m.SchemaVersion != 2 || len(m.Layers) != 1 || m.Layers[0].MediaType != policyfetch.MediaTypeWasmLayer {
			t.Errorf("manifest %+v", m)
		}
		var idx ocispec.Index
		if err := json.Unmarshal([]byte(call(t, d, "oci", "v1/oci_manifest", reg.Host+"/app:multi")), &idx); err != nil {
			t.Fatal(err)
		}
		if len(idx.Manifests) != 2 || idx.Manifests[1].Digest.String() != imageDigest {
			t.Errorf("index %+v", idx)
		}
	})

	t.Run("manifest and config", func(t *testing.T) {
		type answer struct {
			Manifest ocispec.Manifest `json:"manifest"`
			Digest   string           `json:"digest"`
			Config   map[string]any   `json:"config"`
		}
		for image, want := range map[string]string{reg.Host + "/app:1.0": imageDigest, reg.Host + "/app:multi": imageDigest, policy: policyDigest} {
			var a answer
			if err := json.Unmarshal([]byte(call(t, d, "oci", "v1/oci_manifest_config", image)), &a); err != nil {
				t.Fatal(err)
			}
			if a.Digest != want || len(a.Manifest.Layers) != 1 {
				t.Errorf("%s: digest %s, manifest %+v; want digest %s", image, a.Digest, a.Manifest, want)
			}
			if image != policy && a.Config["os"] != "linux" {
				t.Errorf("%s: config %v", image, a.Config)
			}
		}
	})

	trusted := func(digest string) string { return `{"is_trusted":true,"digest":"` + digest + `"}` }
	tests := []struct {
		name, op string
		payload  any
		want     string
	}{
		{name: "v2 public key", op: "v2/verify", want: trusted(policyDigest), payload: map[string]any{
			"type": "SigstorePubKeyVerify", "image": policy, "pub_keys": []string{key.PublicPEM}, "annotations": map[string]string{"env": "prod"}}},
		{name: "v1 public key", op: "v1/verify", want: trusted(policyDigest), payload: map[string]any{
			"SigstorePubKeyVerify": map[string]any{"image": policy, "pub_keys": []string{key.PublicPEM}, "annotations": nil}}},
		{name: "another key", op: "v2/verify", want: "error: Callback evaluation failure: verifying registry://" + policy + ": ", payload: map[string]any{
			"type": "SigstorePubKeyVerify", "image": policy, "pub_keys": []string{other.PublicPEM}, "annotations": nil}},
		{name: "missing annotation", op: "v2/verify", want: "error: Callback evaluation failure: verifying registry://" + policy + ": ", payload: map[string]any{
			"type": "SigstorePubKeyVerify", "image": policy, "pub_keys": []string{key.PublicPEM}, "annotations": map[string]string{"env": "dev"}}},
		{name: "certificate", op: "v2/verify", want: trusted(signedDigest), payload: map[string]any{
			"type": "SigstoreCertificateVerify", "image": signed, "certificate": Bytes(signer.CertPEM),
			"certificate_chain": []Bytes{signer.CAPEM}, "require_rekor_bundle": false, "annotations": nil}},
		{name: "certificate, rekor bundle required", op: "v2/verify", want: "error: Callback evaluation failure: verifying registry://" + signed + ": ", payload: map[string]any{
			"type": "SigstoreCertificateVerify", "image": signed, "certificate": Bytes(signer.CertPEM),
			"certificate_chain": nil, "require_rekor_bundle": true, "annotations": nil}},
		{name: "keyless, no trust root", op: "v2/verify", want: "error: Callback evaluation failure: verifying registry://" + policy + ": ", payload: map[string]any{
			"type": "SigstoreKeylessVerify", "image": policy, "keyless": []KeylessInfo{{Issuer: "https://token.actions.githubusercontent.com", Subject: "x"}}, "annotations": nil}},
		{name: "unsigned image", op: "v2/verify", want: "error: Callback evaluation failure: verifying registry://" + reg.Host + "/app:1.0: ", payload: map[string]any{
			"type": "SigstorePubKeyVerify", "image": reg.Host + "/app:1.0", "pub_keys": []string{key.PublicPEM}, "annotations": nil}},
		{name: "unknown tag", op: "v1/manifest_digest", payload: reg.Host + "/policies/a:v9",
			want: "error: Callback evaluation failure: reading " + reg.Host + "/policies/a:v9: tag v9 not found in " + reg.Host + "/policies/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := call(t, d, "oci", tt.op, tt.payload)
			if !strings.HasPrefix(got, tt.want) {
				t.Fatalf("got %q, want %q...", got, tt.want)
			}
		})
	}
}

// TestOCIKeyless answers the keyless verification requests from a real
// registry, against a test Sigstore (its own Fulcio CA and Rekor log).
func TestOCIKeyless(t *testing.T) {
	reg := verifytest.StartRegistry(t)
	f := reg.Fetcher(t, nil)
	sigstore := verifytest.NewSigstore(t)
	const issuer = "https://issuer.test.invalid"
	workflow := "https://github.com/acme/policies/.github/workflows/release.yml@refs/tags/v1"
	image := func(name string, id verifytest.Identity) (string, string) {
		ref := reg.Host + "/images/" + name + ":v1"
		digest := verifytest.Push(t, f, "registry://"+ref, verifytest.Wasm(name))
		repo := reg.Host + "/images/" + name
		verifytest.WriteSignatures(t, f, repo, digest, sigstore.KeylessLayer(t, repo, digest, id))
		return ref, digest
	}
	alice, aliceDigest := image("alice", verifytest.Identity{Subject: "https://example.com/people/alice", Issuer: issuer})
	ci, ciDigest := image("ci", verifytest.Identity{Subject: workflow, Issuer: verify.GitHubActionsIssuer})
	trusted := func(digest string) string { return `{"is_trusted":true,"digest":"` + digest + `"}` }
	refused := func(ref string) string {
		return "error: Callback evaluation failure: verifying registry://" + ref + ": "
	}
	repo := "policies"
	tests := []struct {
		name    string
		payload map[string]any
		want    string
	}{
		{"subject", map[string]any{"type": "SigstoreKeylessVerify", "image": alice,
			"keyless": []KeylessInfo{{Issuer: issuer, Subject: "https://example.com/people/alice"}}, "annotations": nil}, trusted(aliceDigest)},
		{"another subject", map[string]any{"type": "SigstoreKeylessVerify", "image": alice,
			"keyless": []KeylessInfo{{Issuer: issuer, Subject: "https://example.com/people/bob"}}, "annotations": nil}, refused(alice)},
		{"another issuer", map[string]any{"type": "SigstoreKeylessVerify", "image": alice,
			"keyless": []KeylessInfo{{Issuer: "https://other.test.invalid", Subject: "https://example.com/people/alice"}}, "annotations": nil}, refused(alice)},
		{"url prefix, a slash added", map[string]any{"type": "SigstoreKeylessPrefixVerify", "image": alice,
			"keyless_prefix": []KeylessPrefixInfo{{Issuer: issuer, URLPrefix: "https://example.com/people"}}, "annotations": nil}, trusted(aliceDigest)},
		{"url prefix of a longer name", map[string]any{"type": "SigstoreKeylessPrefixVerify", "image": alice,
			"keyless_prefix": []KeylessPrefixInfo{{Issuer: issuer, URLPrefix: "https://example.com/peop"}}, "annotations": nil}, refused(alice)},
		{"url prefix not a URL", map[string]any{"type": "SigstoreKeylessPrefixVerify", "image": alice,
			"keyless_prefix": []KeylessPrefixInfo{{Issuer: issuer, URLPrefix: "people"}}, "annotations": nil},
			`error: Callback evaluation failure: url_prefix: "people" is not an absolute URL`},
		{"github actions", map[string]any{"type": "SigstoreGithubActionsVerify", "image": ci, "owner": "acme", "repo": &repo, "annotations": nil}, trusted(ciDigest)},
		{"github actions, owner only", map[string]any{"type": "SigstoreGithubActionsVerify", "image": ci, "owner": "acme", "annotations": nil}, trusted(ciDigest)},
		{"github actions, another owner", map[string]any{"type": "SigstoreGithubActionsVerify", "image": ci, "owner": "acme-evil", "annotations": nil}, refused(ci)},
		{"github actions, not a workflow's signature", map[string]any{"type": "SigstoreGithubActionsVerify", "image": alice, "owner": "acme", "annotations": nil}, refused(alice)},
	}
	d := NewDirect(Options{Registry: f, SigstoreTrust: sigstore.TrustRoot(t)})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := call(t, d, "oci", "v2/verify", tt.payload); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("got %q, want %q...", got, tt.want)
			}
		})
	}
	t.Run("a trust root that does not know the CA", func(t *testing.T) {
		d := NewDirect(Options{Registry: f, SigstoreTrust: sigstore.OtherAuthority(t).TrustRoot(t)})
		payload := map[string]any{"type": "SigstoreKeylessVerify", "image": alice,
			"keyless": []KeylessInfo{{Issuer: issuer, Subject: "https://example.com/people/alice"}}, "annotations": nil}
		if got := call(t, d, "oci", "v2/verify", payload); !strings.HasPrefix(got, refused(alice)) {
			t.Fatalf("got %q, want %q...", got, refused(alice))
		}
	})
}

// TestOCICache checks that answers are kept 60 s and failures are not.
func TestOCICache(t *testing.T) {
	reg := verifytest.StartRegistry(t)
	f := reg.Fetcher(t, nil)
	ref := reg.Host + "/policies/moving:v1"
	first := verifytest.Push(t, f, "registry://"+ref, verifytest.Wasm("first"))
	c := &clock{t: time.Now()}
	d := NewDirect(Options{Registry: f, Now: c.now})
	digest := func() string { return call(t, d, "oci", "v1/manifest_digest", ref) }
	want := func(d string) string { return `{"digest":"` + d + `"}` }

	if got := digest(); got != want(first) {
		t.Fatalf("first answer %s", got)
	}
	second := verifytest.Push(t, f, "registry://"+ref, verifytest.Wasm("second"))
	c.t = c.t.Add(59 * time.Second)
	if got := digest(); got != want(first) {
		t.Errorf("after 59 s: %s, want the cached %s", got, first)
	}
	c.t = c.t.Add(2 * time.Second)
	if got := digest(); got != want(second) {
		t.Errorf("after 61 s: %s, want %s", got, second)
	}

	missing := reg.Host + "/policies/later:v1"
	if got := call(t, d, "oci", "v1/manifest_digest", missing); !strings.HasPrefix(got, "error: ") {
		t.Fatalf("missing tag: %s", got)
	}
	later := verifytest.Push(t, f, "registry://"+missing, verifytest.Wasm("later"))
	if got := call(t, d, "oci", "v1/manifest_digest", missing); got != want(later) {
		t.Errorf("a failure was cached: %s, want %s", got, later)
	}
}

func TestResolveImage(t *testing.T) {
	tests := map[string]string{
		"busybox":                  "registry-1.docker.io/library/busybox:latest",
		"busybox:1.36":             "registry-1.docker.io/library/busybox:1.36",
		"kubewarden/policy-server": "registry-1.docker.io/kubewarden/policy-server:latest",
		"docker.io/library/nginx@sha256:" + strings.Repeat("a", 64): "registry-1.docker.io/library/nginx@sha256:" + strings.Repeat("a", 64),
		"ghcr.io/kubewarden/policies/x:v1":                          "ghcr.io/kubewarden/policies/x:v1",
		"registry://ghcr.io/a/b":                                    "ghcr.io/a/b:latest",
		"localhost/a":                                               "localhost/a:latest",
		"127.0.0.1:5000/a/b:c":                                      "127.0.0.1:5000/a/b:c",
	}
	for in, want := range tests {
		got, err := resolveImage(in)
		if err != nil || got != want {
			t.Errorf("resolveImage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := resolveImage(""); err == nil {
		t.Error("no error for an empty reference")
	}
}
