package verify

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"oras.land/oras-go/v2/registry"

	"github.com/wardenhq/warden/internal/policyfetch"
)

// How cosign stores the signatures of a manifest: an OCI image tagged
// <alg>-<hex>.sig in the same repository, one layer per signature.
const (
	// MediaTypeSimpleSigning is the media type of a signature layer; the
	// layer is the signed payload, a simple-signing JSON document.
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// AnnotationSignature is the layer annotation that holds the base64
	// signature over the layer's bytes.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// AnnotationCertificate is the layer annotation that holds the PEM
	// certificate of a keyless or certificate signature.
	AnnotationCertificate = "dev.sigstore.cosign/certificate"
	// AnnotationBundle is the layer annotation that holds a Rekor bundle.
	AnnotationBundle = "dev.sigstore.cosign/bundle"
)

// Limits on what a signature artifact may make Warden read.
const (
	maxSignatureLayers = 256
	maxPayloadBytes    = 1 << 20
)

// ErrNotSigned is found by errors.Is in a verification error when the
// module has no signature at all.
var ErrNotSigned = errors.New("the module is not signed")

// ErrNotTrusted is found by errors.Is in a verification error when the
// module's signatures do not meet the requirements.
var ErrNotTrusted = errors.New("signature verification failed")

// SignatureTag returns the tag under which cosign stores the signatures of
// the manifest with the given digest: sha256:<hex> gives sha256-<hex>.sig.
func SignatureTag(manifestDigest string) (string, error) {
	alg, hex, ok := strings.Cut(manifestDigest, ":")
	if !ok || alg == "" || hex == "" {
		return "", fmt.Errorf("invalid manifest digest %q", manifestDigest)
	}
	return alg + "-" + hex + ".sig", nil
}

// SignaturePayload returns the simple-signing payload cosign signs for the
// manifest manifestDigest of repository (host[:port]/repo):
//
//	{"critical":{"identity":{"docker-reference":"<repository>"},
//	 "image":{"docker-manifest-digest":"<digest>"},
//	 "type":"cosign container image signature"},"optional":<annotations or null>}
//
// It is sigstore's payload.Cosign, so the bytes are cosign's.
func SignaturePayload(repository, manifestDigest string, annotations map[string]string) ([]byte, error) {
	d, err := name.NewDigest(repository + "@" + manifestDigest)
	if err != nil {
		return nil, fmt.Errorf("invalid image %s@%s: %w", repository, manifestDigest, err)
	}
	p := payload.Cosign{Image: d}
	if len(annotations) > 0 {
		p.Annotations = make(map[string]any, len(annotations))
		for k, v := range annotations {
			p.Annotations[k] = v
		}
	}
	return p.MarshalJSON()
}

// sigLayer is one signature read from a signature artifact.
type sigLayer struct {
	index       int
	payload     []byte
	sig         []byte // decoded; nil when the annotation is missing or not base64
	cert        string // PEM certificate of a keyless or certificate signature
	chain       string // PEM chain of cert
	rekorBundle string // cosign's Rekor bundle (JSON)
}

// readSignatures reads the cosign signatures of manifest digest in repo
// (host/repo). A missing or empty signature artifact is ErrNotSigned.
func readSignatures(ctx context.Context, f *policyfetch.Fetcher, repo, digest string) ([]sigLayer, error) {
	tag, err := SignatureTag(digest)
	if err != nil {
		return nil, err
	}
	sigRef := repo + ":" + tag
	man, err := f.FetchManifest(ctx, sigRef)
	if errors.Is(err, policyfetch.ErrNotFound) {
		return nil, fmt.Errorf("%w: no signature at %s", ErrNotSigned, sigRef)
	}
	if err != nil {
		return nil, fmt.Errorf("reading its signatures: %w", err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(man.Bytes, &m); err != nil {
		return nil, fmt.Errorf("reading its signatures: %s is not an image manifest: %w", sigRef, err)
	}
	var layers []sigLayer
	for i, l := range m.Layers {
		if l.MediaType != MediaTypeSimpleSigning {
			continue
		}
		if len(layers) == maxSignatureLayers {
			return nil, fmt.Errorf("reading its signatures: %s has more than %d signatures", sigRef, maxSignatureLayers)
		}
		sl := sigLayer{index: i}
		if s, ok := l.Annotations[AnnotationSignature]; ok {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				sl.sig = b
			}
		}
		sl.cert = l.Annotations[AnnotationCertificate]
		sl.chain = l.Annotations[AnnotationChain]
		sl.rekorBundle = l.Annotations[AnnotationBundle]
		if l.Size > maxPayloadBytes {
			sl.sig = nil // never read, never trusted
			layers = append(layers, sl)
			continue
		}
		if sl.payload, err = f.FetchBlob(ctx, repo, l); err != nil {
			return nil, fmt.Errorf("reading its signatures: %w", err)
		}
		layers = append(layers, sl)
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("%w: %s holds no cosign signature", ErrNotSigned, sigRef)
	}
	return layers, nil
}

// splitRepository parses a registry module URI (registry://host/repo:tag,
// host/repo@sha256:..., ...) into host/repo.
func splitRepository(uri string) (string, error) {
	s := uri
	if scheme, rest, ok := strings.Cut(uri, "://"); ok {
		if scheme != "registry" {
			return "", fmt.Errorf("only registry:// modules carry signatures, not %s://", scheme)
		}
		s = rest
	}
	ref, err := registry.ParseReference(s)
	if err != nil {
		return "", fmt.Errorf("invalid registry reference %q: %w", s, err)
	}
	return ref.Registry + "/" + ref.Repository, nil
}
