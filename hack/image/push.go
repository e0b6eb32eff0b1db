package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// pushOptions say how to reach a registry.
type pushOptions struct {
	// Insecure talks plain HTTP.
	Insecure bool
	// Credential answers the credentials of a registry host; nil means
	// anonymous.
	Credential auth.CredentialFunc
}

// push uploads a (its layers, configs, the manifests of an index's images)
// and tags it as ref, host/repository:tag. Blobs the registry has already
// are not uploaded again. It returns the digest of the tagged manifest.
func push(ctx context.Context, ref string, a artifact, opts pushOptions) (string, error) {
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	tag := repo.Reference.Reference
	if tag == "" || strings.Contains(tag, ":") {
		return "", fmt.Errorf("pushing %s: the reference needs a tag", ref)
	}
	repo.PlainHTTP = opts.Insecure
	client := &auth.Client{
		Client: retry.DefaultClient,
		Header: http.Header{"User-Agent": {"warden-hack-image"}},
		Cache:  auth.NewCache(),
	}
	if opts.Credential != nil {
		client.Credential = opts.Credential
	}
	repo.Client = client

	desc, raw, err := manifestOf(a)
	if err != nil {
		return "", err
	}
	switch a := a.(type) {
	case v1.ImageIndex:
		index, err := a.IndexManifest()
		if err != nil {
			return "", err
		}
		for _, m := range index.Manifests {
			img, err := a.Image(m.Digest)
			if err != nil {
				return "", err
			}
			if err := pushImageContent(ctx, repo, img); err != nil {
				return "", fmt.Errorf("pushing %s (%s): %w", ref, m.Platform, err)
			}
			d, r, err := manifestOf(img)
			if err != nil {
				return "", err
			}
			if err := pushBlob(ctx, repo, d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(r)), nil }); err != nil {
				return "", fmt.Errorf("pushing %s (%s): %w", ref, m.Platform, err)
			}
		}
	case v1.Image:
		if err := pushImageContent(ctx, repo, a); err != nil {
			return "", fmt.Errorf("pushing %s: %w", ref, err)
		}
	default:
		return "", fmt.Errorf("pushing %s: unexpected %T", ref, a)
	}
	if err := repo.PushReference(ctx, desc, bytes.NewReader(raw), tag); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	return desc.Digest.String(), nil
}

// pushImageContent uploads the layers and the config of img.
func pushImageContent(ctx context.Context, repo *remote.Repository, img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := layerDescriptor(l)
		if err != nil {
			return err
		}
		if err := pushBlob(ctx, repo, d, l.Compressed); err != nil {
			return err
		}
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	d := ocispec.Descriptor{MediaType: string(m.Config.MediaType), Digest: digest.Digest(m.Config.Digest.String()), Size: m.Config.Size}
	return pushBlob(ctx, repo, d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(cfg)), nil })
}

// pushBlob uploads what open reads, which d describes (a blob, or a
// manifest pushed by digest), unless the registry has it.
func pushBlob(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, open func() (io.ReadCloser, error)) error {
	if ok, err := repo.Exists(ctx, d); err == nil && ok {
		return nil
	}
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	err = repo.Push(ctx, d, rc)
	if errors.Is(err, errdef.ErrAlreadyExists) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("uploading %s: %w", d.Digest, err)
	}
	return nil
}

// manifestOf returns the descriptor and the bytes of a's manifest.
func manifestOf(a artifact) (ocispec.Descriptor, []byte, error) {
	raw, err := a.RawManifest()
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	mt, err := a.MediaType()
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	return ocispec.Descriptor{MediaType: string(mt), Digest: digest.FromBytes(raw), Size: int64(len(raw))}, raw, nil
}

func layerDescriptor(l v1.Layer) (ocispec.Descriptor, error) {
	h, err := l.Digest()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	size, err := l.Size()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	mt, err := l.MediaType()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{MediaType: string(mt), Digest: digest.Digest(h.String()), Size: size}, nil
}

// compressedSize is what pulling a costs for one platform: the manifest,
// the config and the gzipped layers (of the first image of an index).
func compressedSize(a artifact) (int64, error) {
	if idx, ok := a.(v1.ImageIndex); ok {
		m, err := idx.IndexManifest()
		if err != nil {
			return 0, err
		}
		if len(m.Manifests) == 0 {
			return 0, errors.New("an empty image index")
		}
		if a, err = idx.Image(m.Manifests[0].Digest); err != nil {
			return 0, err
		}
	}
	img, ok := a.(v1.Image)
	if !ok {
		return 0, fmt.Errorf("unexpected %T", a)
	}
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// writeLayout adds the images to the OCI image layout in dir, creating it
// when missing; an image already there under the same name is replaced.
// Each is named by the annotations BuildKit writes:
// io.containerd.image.name (the full reference) and
// org.opencontainers.image.ref.name (the tag).
func writeLayout(dir string, images map[string]artifact) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return fmt.Errorf("writing an OCI layout in %s: %w", dir, err)
		}
	}
	for _, ref := range sortedKeys(images) {
		tag := ref[strings.LastIndex(ref, ":")+1:]
		ann := map[string]string{"io.containerd.image.name": ref, ocispec.AnnotationRefName: tag}
		opts := []layout.Option{layout.WithAnnotations(ann)}
		same := match.Annotation("io.containerd.image.name", ref)
		switch a := images[ref].(type) {
		case v1.ImageIndex:
			err = p.ReplaceIndex(a, same, opts...)
		case v1.Image:
			err = p.ReplaceImage(a, same, opts...)
		}
		if err != nil {
			return fmt.Errorf("writing %s to %s: %w", ref, dir, err)
		}
	}
	return nil
}

// writeTarball writes single-platform images to a tarball that docker load
// and kind load image-archive read.
func writeTarball(file string, images map[string]artifact) error {
	refs := map[name.Reference]v1.Image{}
	for ref, a := range images {
		img, ok := a.(v1.Image)
		if !ok {
			return fmt.Errorf("%s: a tarball holds one platform per image", ref)
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			return err
		}
		refs[tag] = img
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := tarball.MultiRefWrite(refs, f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return f.Close()
}
