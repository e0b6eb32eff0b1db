package policyfetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
)

// Kubewarden's artifact: an OCI image manifest with one Wasm layer and the
// config "{}".
const (
	// MediaTypeWasmLayer is the media type of the only layer of a policy.
	MediaTypeWasmLayer = "application/vnd.wasm.content.layer.v1+wasm"
	// MediaTypeWasmConfig is the media type of the config of a policy.
	MediaTypeWasmConfig = "application/vnd.wasm.config.v1+json"

	dockerManifest   = "application/vnd.docker.distribution.manifest.v2+json"
	maxManifestBytes = 4 << 20
)

// pull gets the Wasm layer of a registry module.
func (f *Fetcher) pull(ctx context.Context, loc location) ([]byte, error) {
	cred, err := f.credential(ctx, loc.ref.Host())
	if err != nil {
		return nil, err
	}
	var data []byte
	err = f.onRegistry(ctx, loc.ref, func(repo *remote.Repository) (err error) {
		data, err = f.pullLayer(ctx, repo)
		return err
	})
	if err != nil {
		return nil, describe(err, loc.host, cred != auth.EmptyCredential)
	}
	return data, nil
}

// pullLayer fetches the manifest, checks its shape and fetches the layer.
func (f *Fetcher) pullLayer(ctx context.Context, repo *remote.Repository) ([]byte, error) {
	ref := repo.Reference
	desc, rc, err := repo.FetchReference(ctx, ref.ReferenceOrDefault())
	if errors.Is(err, errdef.ErrNotFound) {
		if _, derr := ref.Digest(); derr == nil {
			return nil, causef(err, "manifest %s not found in %s/%s", ref.Reference, ref.Registry, ref.Repository)
		}
		return nil, causef(err, "tag %s not found in %s/%s", ref.ReferenceOrDefault(), ref.Registry, ref.Repository)
	}
	if err != nil {
		return nil, err
	}
	if desc.Size > maxManifestBytes {
		rc.Close()
		return nil, fmt.Errorf("the manifest is %d bytes, more than the %d limit", desc.Size, maxManifestBytes)
	}
	raw, err := readVerified(rc, desc, "manifest")
	rc.Close()
	if err != nil {
		return nil, err
	}
	layer, err := policyLayer(desc.MediaType, raw)
	if err != nil {
		return nil, err
	}
	if layer.Size > maxModuleSize {
		return nil, fmt.Errorf("the layer is %d bytes, more than the %d limit", layer.Size, maxModuleSize)
	}
	rc, err = repo.Fetch(ctx, layer)
	if errors.Is(err, errdef.ErrNotFound) {
		return nil, causef(err, "layer %s not found", layer.Digest)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return readVerified(f.withProgress(ctx, rc, layer.Size), layer, "layer")
}

// policyLayer checks that a manifest is Kubewarden's shape and returns its
// Wasm layer. The config media type is not checked: Kubewarden does not
// check it either, and policies pushed by other tools carry other ones.
func policyLayer(mediaType string, raw []byte) (ocispec.Descriptor, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("decoding the manifest: %w", err)
	}
	if mediaType == "" {
		mediaType = m.MediaType
	}
	if mediaType != ocispec.MediaTypeImageManifest && mediaType != dockerManifest {
		return ocispec.Descriptor{}, fmt.Errorf("manifest media type %s is not a Kubewarden policy", mediaType)
	}
	if len(m.Layers) == 1 && m.Layers[0].MediaType == MediaTypeWasmLayer {
		if err := m.Layers[0].Digest.Validate(); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("invalid layer digest: %w", err)
		}
		return m.Layers[0], nil
	}
	var types []string
	for _, l := range m.Layers {
		types = append(types, l.MediaType)
	}
	what := "no layer"
	switch len(types) {
	case 0:
	case 1:
		what = "layer type " + types[0]
	default:
		what = "layer types " + strings.Join(types, ", ")
	}
	return ocispec.Descriptor{}, fmt.Errorf("manifest media type %s with %s is not a Kubewarden policy", mediaType, what)
}

// readVerified reads what desc describes and checks its size and digest.
func readVerified(r io.Reader, desc ocispec.Descriptor, what string) ([]byte, error) {
	if desc.Size < 0 {
		return nil, fmt.Errorf("the %s size is unknown", what)
	}
	data := make([]byte, desc.Size)
	n, err := io.ReadFull(r, data)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, causef(err, "%s truncated: got %d of %d bytes", what, n, desc.Size)
	}
	if err != nil {
		return nil, err
	}
	if extra, _ := r.Read(make([]byte, 1)); extra > 0 {
		return nil, fmt.Errorf("%s is larger than the %d bytes its descriptor gives", what, desc.Size)
	}
	if got := desc.Digest.Algorithm().FromBytes(data); got != desc.Digest {
		return nil, fmt.Errorf("%s digest mismatch: expected %s, got %s", what, desc.Digest, got)
	}
	return data, nil
}

// Push publishes wasm as Kubewarden's artifact (an OCI image manifest with
// the config "{}" of type MediaTypeWasmConfig and one MediaTypeWasmLayer
// layer; annotations go on the manifest) at ref, registry://host/repo:tag or
// host/repo:tag (tag latest when none), and returns the manifest digest.
// Sources and Docker credentials apply as for Fetch. Safe for concurrent use.
func (f *Fetcher) Push(ctx context.Context, ref string, wasm []byte, annotations map[string]string) (string, error) {
	d, err := f.push(ctx, ref, wasm, annotations)
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	return d, nil
}

func (f *Fetcher) push(ctx context.Context, ref string, wasm []byte, annotations map[string]string) (string, error) {
	r, err := parseReference(ref)
	if err != nil {
		return "", err
	}
	if _, err := r.Digest(); err == nil {
		return "", errors.New("push needs a tag, not a digest")
	}
	if !bytes.HasPrefix(wasm, wasmMagic) {
		return "", errors.New("the module is not a WebAssembly binary (no \\0asm magic)")
	}
	config := []byte("{}")
	cdesc := content.NewDescriptorFromBytes(MediaTypeWasmConfig, config)
	ldesc := content.NewDescriptorFromBytes(MediaTypeWasmLayer, wasm)
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      cdesc,
		Layers:      []ocispec.Descriptor{ldesc},
		Annotations: annotations,
	})
	if err != nil {
		return "", err
	}
	mdesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, manifest)
	cred, err := f.credential(ctx, r.Host())
	if err != nil {
		return "", err
	}
	err = f.onRegistry(ctx, r, func(repo *remote.Repository) error {
		if err := repo.Push(ctx, cdesc, bytes.NewReader(config)); err != nil {
			return err
		}
		if err := repo.Push(ctx, ldesc, bytes.NewReader(wasm)); err != nil {
			return err
		}
		return repo.PushReference(ctx, mdesc, bytes.NewReader(manifest), r.ReferenceOrDefault())
	})
	if err != nil {
		return "", describe(err, r.Registry, cred != auth.EmptyCredential)
	}
	return mdesc.Digest.String(), nil
}

// onRegistry runs op against the repository over HTTPS and, when that
// fails to connect and the registry is an insecure source, over plain HTTP,
// as Kubewarden does. (HTTPS to an insecure source does not verify the
// certificate, which covers Kubewarden's intermediate attempt.)
func (f *Fetcher) onRegistry(ctx context.Context, ref registry.Reference, op func(*remote.Repository) error) error {
	repo := &remote.Repository{Client: f.auth, Reference: ref}
	err := op(repo)
	var ue *url.Error
	if err == nil || ctx.Err() != nil || !f.sources.IsInsecure(ref.Registry) || !errors.As(err, &ue) {
		return err
	}
	f.logger.DebugContext(ctx, "registry unreachable over https, trying plain http", keyModule, ref.String())
	repo = &remote.Repository{Client: f.auth, Reference: ref, PlainHTTP: true}
	if perr := op(repo); perr == nil || !errors.As(perr, &ue) {
		return perr
	}
	return err
}

// credential returns the Docker credential for host, reading the config
// file now so that a rotated Secret is seen.
func (f *Fetcher) credential(ctx context.Context, host string) (auth.Credential, error) {
	store, err := f.credentialStore()
	if err != nil {
		return auth.EmptyCredential, err
	}
	cred, err := credentials.Credential(store)(ctx, host)
	if err != nil {
		return auth.EmptyCredential, fmt.Errorf("reading the credentials for %s: %w", host, err)
	}
	return cred, nil
}

func (f *Fetcher) credentialStore() (credentials.Store, error) {
	path := f.docker
	if path == "" {
		if path = os.Getenv("DOCKER_CONFIG"); path == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return credentials.NewMemoryStore(), nil
			}
			path = filepath.Join(home, ".docker")
		}
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	store, err := credentials.NewStore(path, credentials.StoreOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading docker config %s: %w", path, err)
	}
	return store, nil
}
