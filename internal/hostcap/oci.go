package hostcap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry"

	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/verify"
)

const dockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"

// handleOCI answers the oci requests; the caller caches its successes.
func (d *Direct) handleOCI(ctx context.Context, req Request) ([]byte, error) {
	if d.registry == nil {
		return nil, errors.New("this host has no registry client: the oci host capabilities are not available")
	}
	switch r := req.(type) {
	case OCIManifestDigest:
		m, err := d.manifest(ctx, r.Image)
		if err != nil {
			return nil, err
		}
		return json.Marshal(struct {
			Digest string `json:"digest"`
		}{m.Digest})
	case OCIManifest:
		m, err := d.manifest(ctx, r.Image)
		if err != nil {
			return nil, err
		}
		return manifestJSON(m)
	case OCIManifestAndConfig:
		return d.manifestAndConfig(ctx, r.Image)
	case SigstorePubKeyVerify:
		cfg, err := verify.KeyConfig(r.PubKeys, r.Annotations)
		if err != nil {
			return nil, err
		}
		return d.verify(ctx, r.Image, cfg)
	case SigstoreCertificateVerify:
		sig := verify.Signature{
			Kind:               verify.KindCertificate,
			Certificate:        string(r.Certificate),
			RequireRekorBundle: r.RequireRekorBundle,
			Annotations:        r.Annotations,
		}
		for _, c := range r.CertificateChain {
			sig.CertificateChain = append(sig.CertificateChain, string(c))
		}
		return d.verify(ctx, r.Image, &verify.Config{AllOf: []verify.Signature{sig}})
	case SigstoreKeylessVerify:
		cfg := &verify.Config{}
		for _, k := range r.Keyless {
			cfg.AllOf = append(cfg.AllOf, verify.Signature{Kind: verify.KindGenericIssuer, Issuer: k.Issuer,
				Subject: &verify.Subject{Equal: k.Subject}, Annotations: r.Annotations})
		}
		return d.verify(ctx, r.Image, cfg)
	case SigstoreKeylessPrefixVerify:
		cfg := &verify.Config{}
		for _, k := range r.KeylessPrefix {
			subject, err := verify.URLPrefixSubject(k.URLPrefix)
			if err != nil {
				return nil, fmt.Errorf("url_prefix: %w", err)
			}
			cfg.AllOf = append(cfg.AllOf, verify.Signature{Kind: verify.KindGenericIssuer, Issuer: k.Issuer,
				Subject: subject, Annotations: r.Annotations})
		}
		return d.verify(ctx, r.Image, cfg)
	case SigstoreGithubActionsVerify:
		sig := verify.Signature{Kind: verify.KindGitHubAction, Owner: r.Owner, Annotations: r.Annotations}
		if r.Repo != nil {
			sig.Repo = *r.Repo
		}
		return d.verify(ctx, r.Image, &verify.Config{AllOf: []verify.Signature{sig}})
	}
	return nil, fmt.Errorf("unsupported request %s", req.Variant())
}

// manifest reads the manifest an image reference names.
func (d *Direct) manifest(ctx context.Context, image string) (policyfetch.Manifest, error) {
	ref, err := resolveImage(image)
	if err != nil {
		return policyfetch.Manifest{}, err
	}
	return d.registry.FetchManifest(ctx, ref)
}

// verify checks the cosign signatures of an image against cfg and answers
// {"is_trusted": true, "digest": <manifest digest>}; an image that does not
// meet cfg is an error, as in Kubewarden.
func (d *Direct) verify(ctx context.Context, image string, cfg *verify.Config) ([]byte, error) {
	ref, err := resolveImage(image)
	if err != nil {
		return nil, err
	}
	var opts []verify.Option
	if d.trust != nil {
		opts = append(opts, verify.WithTrustRoot(d.trust))
	}
	v, err := verify.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	res, err := v.Verify(ctx, d.registry, "registry://"+ref)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		IsTrusted bool   `json:"is_trusted"`
		Digest    string `json:"digest"`
	}{true, res.ManifestDigest})
}

// manifestAndConfig answers oci/v1/oci_manifest_config: the image manifest
// (for an index, the one of this platform, linux/GOARCH, as Kubewarden's
// registry client picks it), its digest and the image config.
func (d *Direct) manifestAndConfig(ctx context.Context, image string) ([]byte, error) {
	ref, err := resolveImage(image)
	if err != nil {
		return nil, err
	}
	r, err := registry.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("invalid image reference %q: %w", image, err)
	}
	repo := r.Registry + "/" + r.Repository
	m, err := d.registry.FetchManifest(ctx, ref)
	if err != nil {
		return nil, err
	}
	if isIndex(m) {
		var idx ocispec.Index
		if err := json.Unmarshal(m.Bytes, &idx); err != nil {
			return nil, fmt.Errorf("decoding the image index of %s: %w", image, err)
		}
		digest := ""
		for _, e := range idx.Manifests {
			if e.Platform != nil && e.Platform.OS == "linux" && e.Platform.Architecture == runtime.GOARCH {
				digest = e.Digest.String()
				break
			}
		}
		if digest == "" {
			return nil, fmt.Errorf("the image index of %s has no manifest for linux/%s", image, runtime.GOARCH)
		}
		if m, err = d.registry.FetchManifest(ctx, repo+"@"+digest); err != nil {
			return nil, err
		}
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(m.Bytes, &man); err != nil {
		return nil, fmt.Errorf("decoding the manifest of %s: %w", image, err)
	}
	raw, err := d.registry.FetchBlob(ctx, repo, man.Config)
	if err != nil {
		return nil, err
	}
	var config any
	if err := json.Unmarshal(raw, &config); err != nil {
		return nil, fmt.Errorf("the config of %s is not JSON: %w", image, err)
	}
	return json.Marshal(struct {
		Manifest ocispec.Manifest `json:"manifest"`
		Digest   string           `json:"digest"`
		Config   any              `json:"config"`
	}{man, m.Digest, config})
}

// isIndex reports whether a manifest is an image index (or a Docker
// manifest list).
func isIndex(m policyfetch.Manifest) bool {
	if m.MediaType == ocispec.MediaTypeImageIndex || m.MediaType == dockerManifestList {
		return true
	}
	var probe struct {
		Manifests json.RawMessage `json:"manifests"`
		Layers    json.RawMessage `json:"layers"`
	}
	return json.Unmarshal(m.Bytes, &probe) == nil && probe.Manifests != nil && probe.Layers == nil
}

// manifestJSON answers oci/v1/oci_manifest: the image manifest or the
// image index, decoded and written again, as Kubewarden's host writes it.
func manifestJSON(m policyfetch.Manifest) ([]byte, error) {
	if isIndex(m) {
		var idx ocispec.Index
		if err := json.Unmarshal(m.Bytes, &idx); err != nil {
			return nil, fmt.Errorf("decoding the image index: %w", err)
		}
		return json.Marshal(idx)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(m.Bytes, &man); err != nil {
		return nil, fmt.Errorf("decoding the manifest: %w", err)
	}
	return json.Marshal(man)
}

// resolveImage expands an image reference as Docker (and Kubewarden) does:
// busybox is docker.io/library/busybox:latest; a reference without tag or
// digest gets :latest. Docker Hub is reached at registry-1.docker.io.
func resolveImage(image string) (string, error) {
	s := strings.TrimPrefix(image, "registry://")
	if s == "" || strings.ContainsAny(s, " \t\n") {
		return "", fmt.Errorf("invalid image reference %q", image)
	}
	domain, rest, found := strings.Cut(s, "/")
	if !found || (!strings.ContainsAny(domain, ".:") && domain != "localhost" && strings.ToLower(domain) == domain) {
		domain, rest = "docker.io", s
	}
	if (domain == "docker.io" || domain == "index.docker.io") && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	if !strings.Contains(rest, "@") {
		if last := rest[strings.LastIndex(rest, "/")+1:]; !strings.Contains(last, ":") {
			rest += ":latest"
		}
	}
	if domain == "docker.io" || domain == "index.docker.io" {
		domain = "registry-1.docker.io"
	}
	return domain + "/" + rest, nil
}
