package verify

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/wardenhq/warden/internal/policyfetch"
)

// SignOptions configure Sign.
type SignOptions struct {
	// Annotations go into the payload's "optional" section, where the
	// annotations of verification.yml are looked for (cosign sign -a).
	Annotations map[string]string
}

// Signed tells what Sign did.
type Signed struct {
	// ManifestDigest is the digest of the signed module manifest.
	ManifestDigest string
	// SignatureRef is where the signatures are: host/repo:sha256-<hex>.sig.
	SignatureRef string
	// SignatureDigest is the digest of the signature manifest.
	SignatureDigest string
	// AlreadySigned is true when the artifact already held this signature
	// (same payload, verified by the same key) and nothing was written.
	AlreadySigned bool
}

// Sign signs the module pushed at uri (registry://host/repo:tag or
// @sha256:..., or the same without registry://) with key, as cosign sign
// --key does: it resolves the manifest digest, signs the simple-signing
// payload with SHA-256 (ECDSA and RSA PKCS#1 v1.5) or Ed25519, and adds the
// signature as a layer to the OCI image tagged sha256-<hex>.sig in the same
// repository, keeping the signatures already there. The registry is reached
// through f (sources.yml, Docker credentials). Errors read "signing <uri>:
// <cause>". Concurrent Sign calls for one module may lose one another's
// signature, as concurrent cosign runs can.
func Sign(ctx context.Context, f *policyfetch.Fetcher, uri string, key crypto.Signer, opts SignOptions) (Signed, error) {
	s, err := sign(ctx, f, uri, key, opts)
	if err != nil {
		return Signed{}, fmt.Errorf("signing %s: %w", uri, err)
	}
	return s, nil
}

func sign(ctx context.Context, f *policyfetch.Fetcher, uri string, key crypto.Signer, opts SignOptions) (Signed, error) {
	if key == nil {
		return Signed{}, errors.New("no private key")
	}
	signer, err := signature.LoadSigner(key, crypto.SHA256)
	if err != nil {
		return Signed{}, fmt.Errorf("loading the private key: %w", err)
	}
	verifier, err := loadVerifier(key.Public())
	if err != nil {
		return Signed{}, err
	}
	repo, err := splitRepository(uri)
	if err != nil {
		return Signed{}, err
	}
	man, err := f.FetchManifest(ctx, uri)
	if err != nil {
		return Signed{}, err
	}
	tag, err := SignatureTag(man.Digest)
	if err != nil {
		return Signed{}, err
	}
	out := Signed{ManifestDigest: man.Digest, SignatureRef: repo + ":" + tag}

	body, err := SignaturePayload(repo, man.Digest, opts.Annotations)
	if err != nil {
		return Signed{}, err
	}
	sig, err := signer.SignMessage(bytes.NewReader(body))
	if err != nil {
		return Signed{}, fmt.Errorf("signing the payload: %w", err)
	}

	// The signatures already there are kept, in order; one of the same
	// payload by the same key makes this a no-op, as in cosign.
	var adds []mutate.Addendum
	existing, err := f.FetchManifest(ctx, out.SignatureRef)
	switch {
	case errors.Is(err, policyfetch.ErrNotFound):
	case err != nil:
		return Signed{}, err
	default:
		var m ocispec.Manifest
		if err := json.Unmarshal(existing.Bytes, &m); err != nil {
			return Signed{}, fmt.Errorf("%s is not an image manifest: %w", out.SignatureRef, err)
		}
		for _, l := range m.Layers {
			blob, err := f.FetchBlob(ctx, repo, l)
			if err != nil {
				return Signed{}, err
			}
			if l.MediaType == MediaTypeSimpleSigning && bytes.Equal(blob, body) {
				if old, err := base64.StdEncoding.DecodeString(l.Annotations[AnnotationSignature]); err == nil &&
					verifier.VerifySignature(bytes.NewReader(old), bytes.NewReader(blob)) == nil {
					out.SignatureDigest, out.AlreadySigned = existing.Digest, true
					return out, nil
				}
			}
			adds = append(adds, mutate.Addendum{Layer: static.NewLayer(blob, types.MediaType(l.MediaType)), Annotations: l.Annotations})
		}
	}
	adds = append(adds, mutate.Addendum{
		Layer:       static.NewLayer(body, MediaTypeSimpleSigning),
		Annotations: map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)},
	})
	img, err := signatureImage(adds)
	if err != nil {
		return Signed{}, err
	}
	if out.SignatureDigest, err = pushImage(ctx, f, repo, out.SignatureRef, img); err != nil {
		return Signed{}, err
	}
	return out, nil
}

// signatureImage builds cosign's signature image: go-containerregistry's
// empty image with OCI media types, and the layers appended.
func signatureImage(adds []mutate.Addendum) (v1.Image, error) {
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, fmt.Errorf("building the signature image: %w", err)
	}
	return img, nil
}

// pushImage pushes img's config, layers and manifest to repo, tagged as
// ref, and returns the manifest digest.
func pushImage(ctx context.Context, f *policyfetch.Fetcher, repo, ref string, img v1.Image) (string, error) {
	config, err := img.RawConfigFile()
	if err != nil {
		return "", fmt.Errorf("building the signature image: %w", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return "", fmt.Errorf("building the signature image: %w", err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("building the signature image: %w", err)
	}
	if err := f.PushBlob(ctx, repo, m.Config, config); err != nil {
		return "", err
	}
	layers, err := img.Layers()
	if err != nil {
		return "", fmt.Errorf("building the signature image: %w", err)
	}
	for i, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return "", fmt.Errorf("building the signature image: %w", err)
		}
		var buf bytes.Buffer
		_, err = buf.ReadFrom(rc)
		rc.Close()
		if err != nil {
			return "", fmt.Errorf("building the signature image: %w", err)
		}
		if err := f.PushBlob(ctx, repo, m.Layers[i], buf.Bytes()); err != nil {
			return "", err
		}
	}
	return f.PushManifest(ctx, ref, string(types.OCIManifestSchema1), raw)
}

// LoadPrivateKey parses a PEM private key for Sign: a cosign key pair's
// cosign.key ("ENCRYPTED SIGSTORE PRIVATE KEY", or the older "ENCRYPTED
// COSIGN PRIVATE KEY"; password may be empty), or an unencrypted PKCS#8,
// SEC 1 (EC) or PKCS#1 (RSA) key.
func LoadPrivateKey(pemBytes, password []byte) (crypto.Signer, error) {
	if password == nil {
		password = []byte{} // cosign's empty password still encrypts
	}
	k, err := cryptoutils.UnmarshalPEMToPrivateKey(pemBytes, cryptoutils.StaticPasswordFunc(password))
	if err != nil {
		return nil, fmt.Errorf("loading the private key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("loading the private key: %T cannot sign", k)
	}
	return s, nil
}
