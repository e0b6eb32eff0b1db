package verify_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/verify/verifytest"
)

// TestSignatureFormat checks what Sign writes against cosign's layout,
// piece by piece, with sigstore's own payload type and verifier.
func TestSignatureFormat(t *testing.T) {
	fx := newFixture(t)
	key := verifytest.NewKey(t)
	uri, repo, digest := fx.push(t, "format")
	signed := verifytest.Sign(t, fx.pub, uri, key, map[string]string{"env": "prod", "a": "1"})

	tag := "sha256-" + digest[len("sha256:"):] + ".sig"
	if signed.SignatureRef != repo+":"+tag {
		t.Errorf("SignatureRef = %s, want %s", signed.SignatureRef, repo+":"+tag)
	}
	m, raw, config, layers := verifytest.ReadSignatureArtifact(t, fx.pub, repo, signed.SignatureRef)
	if signed.SignatureDigest != sha(raw) {
		t.Errorf("SignatureDigest = %s, manifest is %s", signed.SignatureDigest, sha(raw))
	}

	// The manifest: OCI image manifest and config, one simple-signing
	// layer annotated with the signature, nothing else.
	if m.SchemaVersion != 2 || m.MediaType != ocispec.MediaTypeImageManifest || m.Config.MediaType != ocispec.MediaTypeImageConfig ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != "application/vnd.dev.cosign.simplesigning.v1+json" || len(m.Layers[0].Annotations) != 1 {
		t.Fatalf("manifest %s", raw)
	}
	b64 := m.Layers[0].Annotations["dev.cosignproject.cosign/signature"]
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("signature annotation %q: %v", b64, err)
	}

	// The payload: byte for byte the hand-written one (field names and
	// order), and what sigstore's payload.Cosign marshals.
	want := verifytest.Payload(repo, digest, map[string]string{"a": "1", "env": "prod"})
	if !bytes.Equal(layers[0], want) {
		t.Errorf("payload\n%s\nwant\n%s", layers[0], want)
	}
	d, err := name.NewDigest(repo + "@" + digest)
	if err != nil {
		t.Fatal(err)
	}
	sigstorePayload, err := json.Marshal(payload.Cosign{Image: d, Annotations: map[string]any{"env": "prod", "a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(layers[0], sigstorePayload) {
		t.Errorf("payload\n%s\nsigstore's\n%s", layers[0], sigstorePayload)
	}
	var back payload.Cosign
	if err := json.Unmarshal(layers[0], &back); err != nil || back.Image.DigestStr() != digest || back.Annotations["env"] != "prod" {
		t.Errorf("sigstore reads the payload as %+v, %v", back, err)
	}

	// The signature: ECDSA over SHA-256 of the payload, as sigstore checks it.
	sv, err := signature.LoadVerifier(key.Signer.Public(), crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.VerifySignature(bytes.NewReader(sig), bytes.NewReader(layers[0])); err != nil {
		t.Errorf("sigstore does not verify the signature: %v", err)
	}

	// The config: an OCI image config whose rootfs lists the layer.
	var cfg struct {
		RootFS struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(config, &cfg); err != nil || cfg.RootFS.Type != "layers" ||
		len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != sha(layers[0]) || m.Config.Digest.String() != sha(config) {
		t.Errorf("config %s (%v)", config, err)
	}
}

// TestHandWrittenSignature verifies an artifact written by hand from the
// layout (not by Sign), signed with plain crypto.
func TestHandWrittenSignature(t *testing.T) {
	fx := newFixture(t)
	for i, key := range []*verifytest.Key{verifytest.NewKey(t), verifytest.NewRSAKey(t), verifytest.NewEd25519Key(t)} {
		uri, repo, digest := fx.push(t, fmt.Sprintf("hand%d", i))
		p := verifytest.Payload(repo, digest, map[string]string{"env": "prod"})
		verifytest.WriteSignatures(t, fx.pub, repo, digest,
			verifytest.Layer{Payload: []byte("not json"), Signature: []byte("junk")},
			verifytest.Layer{Payload: p, Signature: key.SignBytes(t, p), Annotations: map[string]string{verify.AnnotationCertificate: ""}})
		v := verifier(t, "apiVersion: v1\nallOf:\n- kind: pubKey\n  key: "+quoted(key.PublicPEM)+"\n  annotations: {env: prod}\n")
		if _, err := fx.fetchVerified(t, v, uri); err != nil {
			t.Errorf("%T: %v", key.Signer, err)
		}
	}
}

func TestSignKeepsSignatures(t *testing.T) {
	fx := newFixture(t)
	alice, bob := verifytest.NewKey(t), verifytest.NewKey(t)
	uri, repo, _ := fx.push(t, "keep")
	first := verifytest.Sign(t, fx.pub, uri, alice, nil)
	again := verifytest.Sign(t, fx.pub, uri, alice, nil)
	if !again.AlreadySigned || again.SignatureDigest != first.SignatureDigest {
		t.Errorf("signing twice with one key: %+v, then %+v", first, again)
	}
	both := verifytest.Sign(t, fx.pub, uri, bob, nil)
	if both.AlreadySigned {
		t.Errorf("bob's signature was taken for alice's")
	}
	m, _, _, _ := verifytest.ReadSignatureArtifact(t, fx.pub, repo, both.SignatureRef)
	if len(m.Layers) != 2 {
		t.Fatalf("%d layers, want alice's and bob's", len(m.Layers))
	}
	if _, err := fx.fetchVerified(t, verifier(t, pubKeys(alice, bob)), uri); err != nil {
		t.Fatal(err)
	}
	// Annotations make another payload: a third signature.
	third := verifytest.Sign(t, fx.pub, uri, alice, map[string]string{"env": "prod"})
	if m, _, _, _ := verifytest.ReadSignatureArtifact(t, fx.pub, repo, third.SignatureRef); third.AlreadySigned || len(m.Layers) != 3 {
		t.Errorf("%+v, %d layers", third, len(m.Layers))
	}

	_, err := verify.Sign(context.Background(), fx.pub, "registry://"+fx.reg.Host+"/policies/missing:v1", alice.Signer, verify.SignOptions{})
	checkErr(t, err, "signing registry://"+fx.reg.Host+"/policies/missing:v1: reading "+fx.reg.Host+"/policies/missing:v1: tag v1 not found in "+fx.reg.Host+"/policies/missing")
}

// TestCosignKeyFile signs with a cosign.key (encrypted with a password, as
// cosign generate-key-pair writes it) and verifies with cosign.pub.
func TestCosignKeyFile(t *testing.T) {
	fx := newFixture(t)
	for _, password := range []string{"s3cret", ""} {
		priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc([]byte(password)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(priv, []byte("ENCRYPTED SIGSTORE PRIVATE KEY")) {
			t.Fatalf("not a cosign key:\n%s", priv)
		}
		key, err := verify.LoadPrivateKey(priv, []byte(password))
		if err != nil {
			t.Fatal(err)
		}
		uri, _, _ := fx.push(t, "cosign-key"+fmt.Sprint(len(password)))
		if _, err := verify.Sign(context.Background(), fx.pub, uri, key, verify.SignOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := fx.fetchVerified(t, verifier(t, "allOf: [{kind: pubKey, key: "+quoted(string(pub))+"}]"), uri); err != nil {
			t.Fatal(err)
		}
		if password != "" {
			_, err = verify.LoadPrivateKey(priv, []byte("wrong"))
			checkErr(t, err, "loading the private key: ")
		}
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
