package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// testMeta is what the test images say about themselves.
var testMeta = metadata{
	Version:  "v9.8.7-test",
	Revision: "0123456789abcdef0123456789abcdef01234567",
	Source:   "https://github.com/wardenhq/warden",
	License:  "Apache-2.0",
	Created:  time.Unix(1700000000, 0).UTC(),
}

// testCABundle stands for the build machine's CA bundle.
var testCABundle = []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n")

// newTestBuilder returns a builder of the module this package is in, which
// writes its binaries into a directory of its own.
func newTestBuilder(t *testing.T) *builder {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return &builder{moduleDir: root, workDir: t.TempDir(), meta: testMeta, caBundle: testCABundle, log: io.Discard}
}

// TestImage builds the fixture main package testdata/versioncmd with the
// flags of the real images (a real binary costs minutes on a cold build
// cache: every package is compiled again under CGO_ENABLED=0 -trimpath),
// twice, checks that both builds give the same binary and the same image,
// pushes the image to an in-process registry, pulls it back and checks its
// config and files, and runs the binary taken out of the image.
func TestImage(t *testing.T) {
	ctx := t.Context()
	host := ociregistry.Start(t, ociregistry.Plain()).Host
	p := platform{OS: "linux", Arch: runtime.GOARCH}
	const pkg, name = "./hack/image/testdata/versioncmd", "versioncmd"

	var digests []v1.Hash
	var images []v1.Image
	var binaries [][]byte
	for range 2 {
		b := newTestBuilder(t)
		file, err := b.buildBinary(ctx, pkg, name, p)
		if err != nil {
			t.Fatal(err)
		}
		bin, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		img, err := b.image(name, bin, p, imageName(name))
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		binaries, images, digests = append(binaries, bin), append(images, img), append(digests, d)
	}
	if !bytes.Equal(binaries[0], binaries[1]) {
		t.Errorf("two builds of %s gave different binaries", pkg)
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds gave the images %s and %s", digests[0], digests[1])
	}
	checkStatic(t, binaries[0])

	ref := host + "/wardenhq/" + imageName(name) + ":" + testMeta.Version
	pushed, err := push(ctx, ref, images[0], pushOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if pushed != digests[0].String() {
		t.Errorf("push returned %s, want %s", pushed, digests[0])
	}
	bin := checkPushedImage(t, ref, name, p, digests[0].String())
	checkVersion(t, bin, name+" (Warden) "+testMeta.Version+"\n")
}

// TestIndex pushes an image index of two platforms, with stand-in binaries,
// and checks that the registry serves each platform's image.
func TestIndex(t *testing.T) {
	ctx := t.Context()
	host := ociregistry.Start(t, ociregistry.Plain()).Host
	b := newTestBuilder(t)
	platforms := []platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}
	var images []platformImage
	for _, p := range platforms {
		img, err := b.image("app", []byte("binary for "+p.String()), p, "warden-app")
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, platformImage{p, img})
	}
	idx := index(images)
	ref := host + "/wardenhq/warden-app:" + testMeta.Version
	want, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := push(ctx, ref, idx, pushOptions{Insecure: true}); err != nil || got != want.String() {
		t.Fatalf("push = %s, %v; want %s", got, err, want)
	}

	repo := testRepository(t, ref)
	desc, raw := fetchReference(t, repo, testMeta.Version)
	if desc.MediaType != ocispec.MediaTypeImageIndex || desc.Digest.String() != want.String() {
		t.Fatalf("the registry serves %s %s, want an OCI index %s", desc.MediaType, desc.Digest, want)
	}
	var got ocispec.Index
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Manifests) != len(platforms) {
		t.Fatalf("the index lists %d manifests, want %d", len(got.Manifests), len(platforms))
	}
	for i, p := range platforms {
		t.Run(p.String(), func(t *testing.T) {
			m := got.Manifests[i]
			if m.Platform == nil || m.Platform.OS != p.OS || m.Platform.Architecture != p.Arch {
				t.Fatalf("manifest %d has the platform %+v, want %s", i, m.Platform, p)
			}
			files := checkPushedImage(t, host+"/wardenhq/warden-app@"+m.Digest.String(), "app", p, m.Digest.String())
			data, err := os.ReadFile(files)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != "binary for "+p.String() {
				t.Errorf("/app holds %q", data)
			}
		})
	}
}

// checkPushedImage pulls ref (host/repo:tag or host/repo@digest) from a
// plain-HTTP registry, checks that it is the image the builder makes for
// the binary name on p, with the manifest digest, and returns the binary
// taken out of it, written to a file with the mode the layer gives it.
func checkPushedImage(t *testing.T, ref, name string, p platform, digest string) string {
	t.Helper()
	repo := testRepository(t, ref)
	desc, raw := fetchReference(t, repo, repo.Reference.Reference)
	if desc.Digest.String() != digest || desc.MediaType != ocispec.MediaTypeImageManifest {
		t.Fatalf("%s is a %s with the digest %s, want an OCI image manifest %s", ref, desc.MediaType, desc.Digest, digest)
	}
	var manifest ocispec.Manifest
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Config.MediaType != ocispec.MediaTypeImageConfig {
		t.Errorf("config media type %s", manifest.Config.MediaType)
	}
	rawConfig, err := content.FetchAll(t.Context(), repo, manifest.Config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(rawConfig, &cfg); err != nil {
		t.Fatal(err)
	}

	wantLabels := map[string]string{
		"org.opencontainers.image.title":    imageName(name),
		"org.opencontainers.image.version":  testMeta.Version,
		"org.opencontainers.image.revision": testMeta.Revision,
		"org.opencontainers.image.source":   testMeta.Source,
		"org.opencontainers.image.licenses": testMeta.License,
		"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"os", cfg.OS, p.OS},
		{"architecture", cfg.Architecture, p.Arch},
		{"user", cfg.Config.User, "65532:65532"},
		{"entrypoint", cfg.Config.Entrypoint, []string{"/" + name}},
		{"cmd", cfg.Config.Cmd, []string(nil)},
		{"working dir", cfg.Config.WorkingDir, "/home/nonroot"},
		{"labels", cfg.Config.Labels, wantLabels},
		{"created", cfg.Created.UTC(), testMeta.Created},
		{"history entries", len(cfg.History), 2},
		{"layers", len(manifest.Layers), 2},
		{"diff ids", len(cfg.RootFS.DiffIDs), 2},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("config %s = %#v, want %#v", c.what, c.got, c.want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Every layer: gzipped tar, its diff id in the config, entries sorted
	// and stamped with the creation time.
	entries := map[string]entry{}
	var binary []byte
	for i, l := range manifest.Layers {
		if l.MediaType != ocispec.MediaTypeImageLayerGzip {
			t.Errorf("layer %d media type %s", i, l.MediaType)
		}
		gz, err := content.FetchAll(t.Context(), repo, l)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != cfg.RootFS.DiffIDs[i].String() {
			t.Errorf("layer %d has the diff id %s, the config says %s", i, got, cfg.RootFS.DiffIDs[i])
		}
		tr := tar.NewReader(bytes.NewReader(raw))
		var names []string
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if !h.ModTime.Equal(testMeta.Created) {
				t.Errorf("%s has the time %s, want %s", h.Name, h.ModTime, testMeta.Created)
			}
			names = append(names, h.Name)
			entries[h.Name] = entry{typ: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid, data: string(data), diffIndex: i}
			if h.Name == name {
				binary = data
			}
		}
		if !slices.IsSorted(names) {
			t.Errorf("layer %d lists %q, not sorted", i, names)
		}
	}

	for _, tc := range []struct {
		path string
		want entry
	}{
		{"etc/", entry{typ: tar.TypeDir, mode: 0o755}},
		{"etc/passwd", entry{typ: tar.TypeReg, mode: 0o644, data: passwd}},
		{"etc/group", entry{typ: tar.TypeReg, mode: 0o644, data: group}},
		{"etc/nsswitch.conf", entry{typ: tar.TypeReg, mode: 0o644, data: nsswitch}},
		{"etc/ssl/certs/ca-certificates.crt", entry{typ: tar.TypeReg, mode: 0o644, data: string(testCABundle)}},
		{"home/nonroot/", entry{typ: tar.TypeDir, mode: 0o700, uid: 65532, gid: 65532}},
		{"tmp/", entry{typ: tar.TypeDir, mode: 0o1777}},
		{name, entry{typ: tar.TypeReg, mode: 0o755, data: string(binary), diffIndex: 1}},
	} {
		got, ok := entries[tc.path]
		if !ok {
			t.Errorf("the image has no /%s", tc.path)
			continue
		}
		if got != tc.want {
			t.Errorf("/%s is %s, want %s", tc.path, got, tc.want)
		}
	}
	if !strings.Contains(entries["etc/passwd"].data, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532")
	}
	if len(binary) == 0 {
		t.Fatalf("the image holds no /%s", name)
	}
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, binary, os.FileMode(entries[name].mode)); err != nil {
		t.Fatal(err)
	}
	return file
}

// entry is a file of an image as its layers give it.
type entry struct {
	typ       byte
	mode      int64
	uid, gid  int
	data      string
	diffIndex int // the layer
}

func (e entry) String() string {
	sum := sha256.Sum256([]byte(e.data))
	return fmt.Sprintf("{type %q, mode %#o, owner %d:%d, %d bytes sha256:%x..., layer %d}",
		e.typ, e.mode, e.uid, e.gid, len(e.data), sum[:6], e.diffIndex)
}

// checkStatic fails unless bin is an ELF executable that needs no dynamic
// loader and no shared library: one that runs on an empty image.
func checkStatic(t *testing.T, bin []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("the binary is not ELF: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary asks for a dynamic loader")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs the shared libraries %q", libs)
	}
}

// checkVersion runs bin --version and compares what it prints.
func checkVersion(t *testing.T, bin, want string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Logf("not running the linux binary on %s", runtime.GOOS)
		return
	}
	cmd := exec.Command(bin, "--version")
	cmd.Env = []string{"HOME=" + t.TempDir()}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --version: %v", filepath.Base(bin), err)
	}
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("%s --version printed %q, want %q", filepath.Base(bin), out, want)
	}
}

// testRepository is ref's repository on a plain-HTTP registry.
func testRepository(t *testing.T, ref string) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	return repo
}

// fetchReference reads the manifest reference (a tag or a digest) names.
func fetchReference(t *testing.T, repo *remote.Repository, reference string) (ocispec.Descriptor, []byte) {
	t.Helper()
	desc, rc, err := repo.FetchReference(t.Context(), reference)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	raw, err := content.ReadAll(rc, desc)
	if err != nil {
		t.Fatal(err)
	}
	return desc, raw
}

// TestImageNames checks that the builder names the images as the Helm
// chart pulls them, and finds every binary under cmd/.
func TestImageNames(t *testing.T) {
	var values struct {
		Controller   struct{ Image struct{ Repository string } } `json:"controller"`
		PolicyServer struct{ Image struct{ Repository string } } `json:"policyServer"`
		AuditScanner struct{ Image struct{ Repository string } } `json:"auditScanner"`
		PolicySyncer struct{ Image struct{ Repository string } } `json:"policySyncer"`
	}
	raw, err := os.ReadFile("../../charts/warden/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	var opts Options
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	opts.AddFlags(fs)
	repo := fs.Lookup("repo").DefValue

	binaries, err := binariesIn("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ binary, chart string }{
		{"controller", values.Controller.Image.Repository},
		{"policy-server", values.PolicyServer.Image.Repository},
		{"audit-scanner", values.AuditScanner.Image.Repository},
		{"policy-syncer", values.PolicySyncer.Image.Repository},
		{"wardenctl", "ghcr.io/wardenhq/wardenctl"},
	} {
		if got := repo + "/" + imageName(tc.binary); got != tc.chart {
			t.Errorf("the image of %s is %s, the chart pulls %s", tc.binary, got, tc.chart)
		}
		if !slices.Contains(binaries, tc.binary) {
			t.Errorf("binariesIn(module) = %q, want it to hold %s", binaries, tc.binary)
		}
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		err  string
	}{
		{name: "defaults", opts: Options{Binaries: "all", Repo: "ghcr.io/wardenhq", Platforms: "linux/amd64,linux/arm64"}},
		{name: "local registry", opts: Options{Binaries: "controller", Repo: "127.0.0.1:5000/wardenhq", Platforms: "linux/amd64", Push: true, Insecure: true}},
		{name: "registry host only", opts: Options{Binaries: "controller", Repo: "localhost:5000", Platforms: "linux/arm/v7", Out: "x.tar"}},
		{name: "no binary", opts: Options{Binaries: " ", Repo: "r/x", Platforms: "linux/amd64"}, err: "-binary is required"},
		{name: "tag in repo", opts: Options{Binaries: "all", Repo: "ghcr.io/wardenhq:v1", Platforms: "linux/amd64"}, err: "want a repository prefix"},
		{name: "bad tag", opts: Options{Binaries: "all", Repo: "r/x", Tag: "v1+build", Platforms: "linux/amd64"}, err: `-tag "v1+build" is not a valid image tag`},
		{name: "windows", opts: Options{Binaries: "all", Repo: "r/x", Platforms: "windows/amd64"}, err: "linux only"},
		{name: "twice", opts: Options{Binaries: "all", Repo: "r/x", Platforms: "linux/amd64,linux/amd64"}, err: "given twice"},
		{name: "variant", opts: Options{Binaries: "all", Repo: "r/x", Platforms: "linux/amd64/v9"}, err: "unsupported variant"},
		{name: "tarball of two platforms", opts: Options{Binaries: "all", Repo: "r/x", Platforms: "linux/amd64,linux/arm64", Out: "i.tar"}, err: "one platform per image"},
		{name: "insecure without push", opts: Options{Binaries: "all", Repo: "r/x", Platforms: "linux/amd64", Insecure: true}, err: "-insecure only matters with -push"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Validate() = %v, want %q", err, tc.err)
			}
		})
	}
}

// TestRun checks the command line's exit codes and messages, without
// building.
func TestRun(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{args: []string{"image", "-help"}, code: 0, stderr: "usage: go run ./hack/image"},
		{args: []string{"image", "-platfrom", "linux/amd64"}, code: 2, stderr: "flag provided but not defined: -platfrom"},
		{args: []string{"image", "-binary", "nosuch"}, code: 1, stderr: "image: -binary nosuch: no cmd/nosuch/main.go (have audit-scanner, controller, "},
		{args: []string{"image", "-binary", "controller", "-created", "yesterday"}, code: 1, stderr: `image: creation time "yesterday": want Unix seconds`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("run = %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.stderr)
			}
		})
	}
}
