package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/wardenhq/warden/hack/internal/cmdline"
)

const usage = `usage: go run ./hack/image [-binary NAMES] [-repo PREFIX] [-tag TAG] [-platform LIST] [-push [-insecure]] [-out DIR|FILE.tar]

Builds minimal non-root images of the binaries under cmd/, without a Docker
daemon, reproducibly (docs/images.md). For each image it prints "REFERENCE
DIGEST SIZE", SIZE being what one platform's pull downloads; -push uploads
the images, -out writes them, without either it only builds.`

// run is the whole program: args[0] is the program name. It returns 0 when
// every image was built (and pushed or written), 1 on failure, 2 for
// invalid flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var opts Options
	if code, ok := cmdline.Parse("image", usage, args, &opts, stderr); !ok {
		return code
	}
	if err := buildAll(ctx, &opts, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	return 0
}

// buildAll builds, then pushes or writes, the images opts asks for.
func buildAll(ctx context.Context, opts *Options, stdout, stderr io.Writer) error {
	moduleDir, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	binaries, err := selectBinaries(moduleDir, opts.Binaries)
	if err != nil {
		return err
	}
	platforms, err := parsePlatforms(opts.Platforms)
	if err != nil {
		return err
	}
	meta, err := resolveMetadata(ctx, moduleDir, opts)
	if err != nil {
		return err
	}
	tag := opts.Tag
	if tag == "" {
		tag = meta.Version
		if !tagPattern.MatchString(tag) {
			return fmt.Errorf("the version %q is not a valid image tag: give -tag", tag)
		}
	}
	caBundle, err := readCABundle(opts.CACertificates, stderr)
	if err != nil {
		return err
	}
	workDir, err := os.MkdirTemp("", "warden-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workDir)
	b := &builder{moduleDir: moduleDir, workDir: workDir, meta: meta, caBundle: caBundle, log: stderr}

	var pushOpts pushOptions
	if opts.Push {
		store, err := credentials.NewStoreFromDocker(credentials.StoreOptions{})
		if err != nil {
			return fmt.Errorf("reading Docker's credentials: %w", err)
		}
		pushOpts = pushOptions{Insecure: opts.Insecure, Credential: credentials.Credential(store)}
	}
	built := map[string]artifact{}
	for _, name := range binaries {
		ref := opts.Repo + "/" + imageName(name) + ":" + tag
		a, err := b.build(ctx, name, platforms)
		if err != nil {
			return err
		}
		dgst, err := a.Digest()
		if err != nil {
			return err
		}
		size, err := compressedSize(a)
		if err != nil {
			return err
		}
		if opts.Push {
			fmt.Fprintf(stderr, "image: pushing %s\n", ref)
			if _, err := push(ctx, ref, a, pushOpts); err != nil {
				return err
			}
		}
		built[ref] = a
		fmt.Fprintf(stdout, "%s %s %s\n", ref, dgst, mib(size))
	}
	switch {
	case opts.Out == "":
	case strings.HasSuffix(opts.Out, ".tar"):
		return writeTarball(opts.Out, built)
	default:
		return writeLayout(opts.Out, built)
	}
	return nil
}

// moduleRoot is the directory of the main module the go command sees from
// the working directory.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run it inside Warden's module (go run ./hack/image)")
	}
	return filepath.Dir(gomod), nil
}

// binariesIn lists the main packages under cmd/ of the module in dir.
func binariesIn(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "cmd"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "cmd", e.Name(), "main.go")); err == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// selectBinaries resolves -binary against cmd/.
func selectBinaries(moduleDir, list string) ([]string, error) {
	all, err := binariesIn(moduleDir)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(list) == "all" {
		return all, nil
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" || slices.Contains(names, n) {
			continue
		}
		if !slices.Contains(all, n) {
			return nil, fmt.Errorf("-binary %s: no cmd/%s/main.go (have %s)", n, n, strings.Join(all, ", "))
		}
		names = append(names, n)
	}
	return names, nil
}

// resolveMetadata fills what the flags leave empty from the environment
// and from git (read-only commands), falling back to "dev", no revision and
// the Unix epoch outside a git checkout.
func resolveMetadata(ctx context.Context, moduleDir string, opts *Options) (metadata, error) {
	meta := metadata{Version: opts.Version, Revision: opts.Revision, Source: opts.Source, License: opts.License}
	if meta.Version == "" {
		meta.Version = git(ctx, moduleDir, "describe", "--tags", "--always")
		if meta.Version == "" {
			meta.Version = "dev"
		}
	}
	if meta.Revision == "" {
		meta.Revision = git(ctx, moduleDir, "rev-parse", "HEAD")
	}
	created := opts.Created
	if created == "" {
		created = os.Getenv("SOURCE_DATE_EPOCH")
	}
	if created == "" {
		created = git(ctx, moduleDir, "log", "-1", "--format=%ct")
	}
	if created == "" {
		created = "0"
	}
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil || secs < 0 {
		return metadata{}, fmt.Errorf("creation time %q: want Unix seconds", created)
	}
	meta.Created = time.Unix(secs, 0).UTC()
	return meta, nil
}

// git runs a read-only git command in dir and returns its trimmed output,
// or "" when it fails (no git, not a checkout, no commit).
func git(ctx context.Context, dir string, args ...string) string {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// readCABundle reads the CA bundle to copy into the images; nil means none.
// A missing default bundle is left out with a warning, a missing bundle
// named by -ca-certificates is an error.
func readCABundle(file string, warn io.Writer) ([]byte, error) {
	if file == "none" || file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) && file == defaultCACertificates {
		fmt.Fprintf(warn, "image: warning: %s is missing, the images hold no CA certificates (install ca-certificates, or give -ca-certificates)\n", file)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	return data, nil
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
