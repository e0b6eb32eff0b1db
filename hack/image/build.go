package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// versionVar is the variable the binaries print as their version.
const versionVar = "github.com/wardenhq/warden/internal/buildinfo.Version"

// buildTags are the build tags of the binaries. grpcnotrace keeps gRPC from
// linking golang.org/x/net/trace, which nothing in Warden serves: its
// html/template calls methods by name, and a binary that does that keeps
// every exported method of every type (about a fifth of policy-server).
const buildTags = "grpcnotrace"

// metadata is what the images say about where they come from.
type metadata struct {
	Version  string // linked into the binaries; org.opencontainers.image.version
	Revision string // org.opencontainers.image.revision; empty: no label
	Source   string // org.opencontainers.image.source; empty: no label
	License  string // org.opencontainers.image.licenses; empty: no label
	Created  time.Time
}

// builder builds binaries of one Go module and wraps them in images. It is
// not safe for concurrent use.
type builder struct {
	moduleDir string    // the root of the Go module
	workDir   string    // where binaries are written
	meta      metadata  // the same for every image
	caBundle  []byte    // nil: no CA certificates in the images
	log       io.Writer // progress and the go command's output

	base v1.Layer // baseFiles as a layer, made once
}

// buildBinary compiles the main package pkg (./cmd/controller) for p into
// workDir and returns the file: static (CGO_ENABLED=0), without paths of
// the build machine (-trimpath), without VCS stamping (-buildvcs=false, so
// uncommitted changes elsewhere in the tree do not change it), stripped
// (-s -w), with buildTags and the version linked in. GOFLAGS is cleared so
// that the caller's (-race, -tags) cannot change the binary.
func (b *builder) buildBinary(ctx context.Context, pkg, name string, p platform) (string, error) {
	out := filepath.Join(b.workDir, p.OS+"-"+p.Arch+p.Variant, name)
	ldflags := "-s -w -X " + versionVar + "=" + b.meta.Version
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-tags", buildTags, "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = b.moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GIT_OPTIONAL_LOCKS=0")
	cmd.Env = append(cmd.Env, p.goEnv()...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s for %s: %w\n%s", pkg, p, err, output.Bytes())
	}
	return out, nil
}

// image wraps binary, built for p, in an image whose entrypoint is
// /<name>; title is its org.opencontainers.image.title label.
func (b *builder) image(name string, binary []byte, p platform, title string) (v1.Image, error) {
	if b.base == nil {
		base, err := layer(baseFiles(b.caBundle), b.meta.Created)
		if err != nil {
			return nil, fmt.Errorf("making the base layer: %w", err)
		}
		b.base = base
	}
	app, err := layer([]file{{Path: name, Mode: 0o755, Data: binary}}, b.meta.Created)
	if err != nil {
		return nil, fmt.Errorf("making the layer of %s: %w", name, err)
	}
	created := v1.Time{Time: b.meta.Created.UTC()}
	cfg := &v1.ConfigFile{
		Architecture: p.Arch,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      created,
		Config: v1.Config{
			User:       strconv.Itoa(nonrootID) + ":" + strconv.Itoa(nonrootID),
			Entrypoint: []string{path.Join("/", name)},
			WorkingDir: nonrootHome,
			Env:        []string{"PATH=/"},
			Labels:     b.labels(title),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: b.base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/image: /etc/passwd, /etc/group, CA certificates, /home/nonroot, /tmp",
		}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/image: go build -trimpath -o /" + name,
		}})
}

// labels are the OCI annotations of an image, as config labels.
func (b *builder) labels(title string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   title,
		"org.opencontainers.image.version": b.meta.Version,
		"org.opencontainers.image.created": b.meta.Created.UTC().Format(time.RFC3339),
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.revision": b.meta.Revision,
		"org.opencontainers.image.source":   b.meta.Source,
		"org.opencontainers.image.licenses": b.meta.License,
	} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

// artifact is what the builder gives for one binary: a v1.Image for one
// platform, a v1.ImageIndex for several.
type artifact interface {
	MediaType() (types.MediaType, error)
	RawManifest() ([]byte, error)
	Digest() (v1.Hash, error)
}

// build builds the image of the binary in cmd/<name> for every platform.
func (b *builder) build(ctx context.Context, name string, platforms []platform) (artifact, error) {
	var images []platformImage
	for _, p := range platforms {
		fmt.Fprintf(b.log, "image: building %s for %s\n", name, p)
		start := time.Now()
		bin, err := b.buildBinary(ctx, "./cmd/"+name, name, p)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		img, err := b.image(name, data, p, imageName(name))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(b.log, "image: built %s for %s in %s (binary %s)\n", name, p, time.Since(start).Round(time.Second), mib(int64(len(data))))
		if len(platforms) == 1 {
			return img, nil
		}
		images = append(images, platformImage{p, img})
	}
	return index(images), nil
}

// platformImage is an image and the platform it was built for.
type platformImage struct {
	platform platform
	image    v1.Image
}

// index is the OCI image index of images, in their order.
func index(images []platformImage) v1.ImageIndex {
	adds := make([]mutate.IndexAddendum, 0, len(images))
	for _, pi := range images {
		plat := pi.platform.v1()
		adds = append(adds, mutate.IndexAddendum{Add: pi.image, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
}

// mib formats a byte count in MiB.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
