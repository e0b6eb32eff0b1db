package policyfetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// This file gives other packages (signature verification and signing)
// plain access to manifests and blobs, through the same sources.yml, Docker
// credentials and plain-HTTP fallback as Fetch and Push.

// ErrNotFound is found by errors.Is in an error of FetchManifest or
// FetchBlob when the registry has no such tag, manifest or blob.
var ErrNotFound = errdef.ErrNotFound

// Manifest is a manifest as a registry served it.
type Manifest struct {
	// MediaType is the media type the registry gave, or else the mediaType
	// field of the manifest.
	MediaType string
	// Digest is the digest of Bytes, "sha256:<hex>"; it has been checked
	// against the reference (a digest reference) or the registry's answer.
	Digest string
	// Bytes is the manifest, byte for byte.
	Bytes []byte
}

// FetchManifest reads the manifest that ref names: registry://host/repo:tag,
// registry://host/repo@sha256:..., or the same without registry:// (tag
// latest when none). Errors read "reading <ref>: <cause>" on one line.
// Safe for concurrent use.
func (f *Fetcher) FetchManifest(ctx context.Context, ref string) (Manifest, error) {
	r, err := parseReference(ref)
	if err != nil {
		return Manifest{}, fmt.Errorf("reading %s: %w", ref, err)
	}
	m, err := f.manifest(ctx, r)
	if err != nil {
		return Manifest{}, fmt.Errorf("reading %s: %w", r, err)
	}
	return m, nil
}

// FetchBlob reads the blob desc describes from repo (registry://host/repo or
// host/repo) and checks its size and digest. Blobs larger than 256 MiB are
// refused. Errors read "reading <repo>@<digest>: <cause>" on one line.
// Safe for concurrent use.
func (f *Fetcher) FetchBlob(ctx context.Context, repo string, desc ocispec.Descriptor) ([]byte, error) {
	r, err := parseReference(repo)
	if err != nil {
		return nil, fmt.Errorf("reading blob %s: %w", desc.Digest, err)
	}
	data, err := f.blob(ctx, r, desc, "blob")
	if err != nil {
		return nil, fmt.Errorf("reading %s/%s@%s: %w", r.Registry, r.Repository, desc.Digest, err)
	}
	return data, nil
}

// PushBlob uploads data, which desc describes, to repo (registry://host/repo
// or host/repo), unless the registry has it already. Safe for concurrent use.
func (f *Fetcher) PushBlob(ctx context.Context, repo string, desc ocispec.Descriptor, data []byte) error {
	r, err := parseReference(repo)
	if err != nil {
		return fmt.Errorf("pushing blob %s: %w", desc.Digest, err)
	}
	cred, err := f.credential(ctx, r.Host())
	if err != nil {
		return fmt.Errorf("pushing blob %s: %w", desc.Digest, err)
	}
	err = f.onRegistry(ctx, r, func(repo *remote.Repository) error {
		if ok, err := repo.Exists(ctx, desc); err == nil && ok {
			return nil
		}
		err := repo.Push(ctx, desc, bytes.NewReader(data))
		if errors.Is(err, errdef.ErrAlreadyExists) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("pushing %s/%s@%s: %w", r.Registry, r.Repository, desc.Digest, describe(err, r.Registry, cred != auth.EmptyCredential))
	}
	return nil
}

// PushManifest uploads a manifest of the given media type and tags it as
// ref (registry://host/repo:tag or host/repo:tag); the blobs it names must
// be there already. It returns the manifest digest. Safe for concurrent use.
func (f *Fetcher) PushManifest(ctx context.Context, ref, mediaType string, manifest []byte) (string, error) {
	r, err := parseReference(ref)
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	if _, err := r.Digest(); err == nil || r.Reference == "" {
		return "", fmt.Errorf("pushing %s: a manifest needs a tag", ref)
	}
	desc := content.NewDescriptorFromBytes(mediaType, manifest)
	cred, err := f.credential(ctx, r.Host())
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	err = f.onRegistry(ctx, r, func(repo *remote.Repository) error {
		return repo.PushReference(ctx, desc, bytes.NewReader(manifest), r.Reference)
	})
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", r, describe(err, r.Registry, cred != auth.EmptyCredential))
	}
	return desc.Digest.String(), nil
}

// maxReferrers caps how many referrers Referrers returns.
const maxReferrers = 1024

// Referrers lists the manifests of repo (registry://host/repo or host/repo)
// whose subject is the manifest subjectDigest and whose artifactType is
// artifactType (all of them when empty): through the registry's referrers
// API, or the referrers tag schema (the index tagged sha256-<hex>) when the
// registry lacks the API, as the OCI distribution spec says. No referrer
// is an empty list, not an error. Safe for concurrent use.
func (f *Fetcher) Referrers(ctx context.Context, repo, subjectDigest, artifactType string) ([]ocispec.Descriptor, error) {
	r, err := parseReference(repo)
	if err != nil {
		return nil, fmt.Errorf("listing the referrers of %s: %w", subjectDigest, err)
	}
	d, err := digest.Parse(subjectDigest)
	if err != nil {
		return nil, fmt.Errorf("listing the referrers of %s: %w", subjectDigest, err)
	}
	cred, err := f.credential(ctx, r.Host())
	if err != nil {
		return nil, fmt.Errorf("listing the referrers of %s: %w", subjectDigest, err)
	}
	var out []ocispec.Descriptor
	err = f.onRegistry(ctx, r, func(repo *remote.Repository) error {
		out = out[:0]
		subject := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: d}
		return repo.Referrers(ctx, subject, artifactType, func(page []ocispec.Descriptor) error {
			if len(out)+len(page) > maxReferrers {
				return fmt.Errorf("more than %d referrers", maxReferrers)
			}
			out = append(out, page...)
			return nil
		})
	})
	if errors.Is(err, errdef.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the referrers of %s/%s@%s: %w", r.Registry, r.Repository, subjectDigest, describe(err, r.Registry, cred != auth.EmptyCredential))
	}
	return out, nil
}

// manifest reads the manifest r names; its error is the cause alone.
func (f *Fetcher) manifest(ctx context.Context, r registry.Reference) (Manifest, error) {
	cred, err := f.credential(ctx, r.Host())
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	err = f.onRegistry(ctx, r, func(repo *remote.Repository) error {
		desc, rc, err := repo.FetchReference(ctx, r.ReferenceOrDefault())
		if errors.Is(err, errdef.ErrNotFound) {
			if _, derr := r.Digest(); derr == nil {
				return causef(err, "manifest %s not found in %s/%s", r.Reference, r.Registry, r.Repository)
			}
			return causef(err, "tag %s not found in %s/%s", r.ReferenceOrDefault(), r.Registry, r.Repository)
		}
		if err != nil {
			return err
		}
		defer rc.Close()
		if desc.Size > maxManifestBytes {
			return fmt.Errorf("the manifest is %d bytes, more than the %d limit", desc.Size, maxManifestBytes)
		}
		raw, err := readVerified(rc, desc, "manifest")
		if err != nil {
			return err
		}
		mediaType := desc.MediaType
		if mediaType == "" {
			var probe struct {
				MediaType string `json:"mediaType"`
			}
			_ = json.Unmarshal(raw, &probe)
			mediaType = probe.MediaType
		}
		m = Manifest{MediaType: mediaType, Digest: desc.Digest.String(), Bytes: raw}
		return nil
	})
	if err != nil {
		return Manifest{}, describe(err, r.Registry, cred != auth.EmptyCredential)
	}
	return m, nil
}

// blob reads the blob desc describes from r's repository; its error is the
// cause alone. what names the blob in errors (layer, blob).
func (f *Fetcher) blob(ctx context.Context, r registry.Reference, desc ocispec.Descriptor, what string) ([]byte, error) {
	if err := desc.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("invalid %s digest: %w", what, err)
	}
	if desc.Size > maxModuleSize {
		return nil, fmt.Errorf("the %s is %d bytes, more than the %d limit", what, desc.Size, maxModuleSize)
	}
	cred, err := f.credential(ctx, r.Host())
	if err != nil {
		return nil, err
	}
	var data []byte
	err = f.onRegistry(ctx, r, func(repo *remote.Repository) error {
		rc, err := repo.Fetch(ctx, desc)
		if errors.Is(err, errdef.ErrNotFound) {
			return causef(err, "%s %s not found", what, desc.Digest)
		}
		if err != nil {
			return err
		}
		defer rc.Close()
		var r io.Reader = rc
		if what == "layer" { // the module, not a signature or a config
			r = f.withProgress(ctx, rc, desc.Size)
		}
		data, err = readVerified(r, desc, what)
		return err
	})
	if err != nil {
		return nil, describe(err, r.Registry, cred != auth.EmptyCredential)
	}
	return data, nil
}
