package policybuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/wardenhq/warden/internal/metadata"
)

// Options configures Build. The zero value uses the defaults.
type Options struct {
	// CacheDir holds the built modules. Default: os.UserCacheDir()/warden/policybuild.
	CacheDir string
	// Go is the go command to build with. Default: "go" from PATH, else
	// runtime.GOROOT()/bin/go.
	Go string
	// GCFlags is the value of the build's -gcflags. Default: "all=-B", as
	// Kubewarden's Makefile.wasigo builds. A policy built the way one
	// published policy is built sets that policy's flags (cel-policy:
	// "all=-l -B -wb=false"). The flags are part of the cache key.
	GCFlags string
}

// metadataFile is the file of a policy directory that holds its metadata.
const metadataFile = "metadata.yml"

// keyVersion changes when the way a module is produced from the same inputs
// changes, so that older cache entries are not reused.
const keyVersion = "policybuild/1"

// buildCount counts the go builds Build has run in this process (tests
// observe cache hits through it).
var buildCount atomic.Int64

// Build compiles the policy in srcDir (a directory with main.go and
// metadata.yml), embeds its metadata, and returns the path of the annotated
// module, reusing a cached build.
//
// The policy is built with GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOWORK=off
// in the Go module that contains srcDir, as a c-shared reactor when its
// executionMode is kubewarden-wapc (the default) and as a command when it is
// wasi; other modes are an error. A kubewarden-wapc policy whose metadata has
// no protocolVersion gets v1, as `kwctl annotate` fills it.
//
// The cache key covers the go toolchain (version, GOEXPERIMENT, GOWASM), the
// build flags (Options.GCFlags among them), and every file of the module that the build may read: all of
// it except _test.go files, hidden and testdata directories, nested modules,
// and the files of other policy directories (those with a metadata.yml).
//
// Build is safe for concurrent use. Concurrent calls for the same inputs in
// one process build once; across processes each may build, and since the
// module is written to a temporary file and renamed into place, readers only
// ever see complete modules.
func Build(ctx context.Context, srcDir string, opts Options) (string, error) {
	src, err := filepath.Abs(srcDir)
	if err != nil {
		return "", err
	}
	mdDoc, err := os.ReadFile(filepath.Join(src, metadataFile))
	if err != nil {
		return "", fmt.Errorf("reading policy metadata: %w", err)
	}
	md, err := metadata.Parse(mdDoc)
	if err != nil {
		return "", fmt.Errorf("policy %s: %w", src, err)
	}
	var modeFlags []string
	switch md.Mode() {
	case metadata.ModeWapc:
		modeFlags = []string{"-buildmode=c-shared"}
		if md.ProtocolVersion == "" {
			md.ProtocolVersion = metadata.ProtocolV1
		}
	case metadata.ModeWASI:
	default:
		return "", fmt.Errorf("policy %s: execution mode %q cannot be built from Go: want %s or %s",
			src, md.Mode(), metadata.ModeWapc, metadata.ModeWASI)
	}
	// The flags of Kubewarden's policies/Makefile.wasigo: no bounds checks,
	// no DWARF or symbol table. Smaller modules, faster guests.
	gcflags := opts.GCFlags
	if gcflags == "" {
		gcflags = "all=-B"
	}
	args := slices.Concat([]string{"build", "-trimpath", "-buildvcs=false", "-gcflags=" + gcflags, "-ldflags=-w -s"}, modeFlags)

	modRoot, err := moduleRoot(src)
	if err != nil {
		return "", err
	}
	pkg, err := filepath.Rel(modRoot, src)
	if err != nil {
		return "", err
	}
	pkg = "./" + filepath.ToSlash(pkg)

	goCmd, err := opts.goCommand()
	if err != nil {
		return "", err
	}
	cacheDir, err := opts.cacheDir()
	if err != nil {
		return "", err
	}
	env := buildEnv()
	toolchain, err := toolchainID(ctx, goCmd, modRoot, env)
	if err != nil {
		return "", err
	}
	key, err := cacheKey(toolchain, args, pkg, mdDoc, modRoot, src)
	if err != nil {
		return "", fmt.Errorf("hashing the sources of policy %s: %w", src, err)
	}
	out := filepath.Join(cacheDir, filepath.Base(src)+"-"+key+".wasm")

	release, err := lockKey(ctx, out)
	if err != nil {
		return "", err
	}
	defer release()
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("creating the policy cache: %w", err)
	}
	if err := build(ctx, goCmd, env, modRoot, args, pkg, md, out); err != nil {
		return "", fmt.Errorf("building policy %s: %w", src, err)
	}
	return out, nil
}

// build runs go build into a temporary directory next to out, embeds md and
// renames the result to out.
func build(ctx context.Context, goCmd string, env []string, modRoot string, args []string, pkg string, md *metadata.Metadata, out string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".build-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	raw := filepath.Join(tmp, "policy.wasm")
	cmd := exec.CommandContext(ctx, goCmd, slices.Concat(args, []string{"-o", raw, pkg})...)
	cmd.Dir = modRoot
	cmd.Env = env
	buildCount.Add(1)
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", goCmd, strings.Join(cmd.Args[1:], " "), err, bytes.TrimSpace(output))
	}
	module, err := os.ReadFile(raw)
	if err != nil {
		return err
	}
	annotated, err := metadata.Embed(module, md)
	if err != nil {
		return fmt.Errorf("embedding metadata: %w", err)
	}
	return writeAtomic(out, annotated, tmp)
}

// writeAtomic writes data to path through a file in tmpDir (on the same file
// system) and a rename.
func writeAtomic(path string, data []byte, tmpDir string) error {
	f, err := os.CreateTemp(tmpDir, "annotated-*.wasm")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// buildEnv is the environment of the go commands: the caller's, with the
// target and the settings that would change the output or break the build
// pinned. GOFLAGS is cleared because Build passes its flags explicitly.
func buildEnv() []string {
	return append(os.Environ(),
		"GOOS=wasip1",
		"GOARCH=wasm",
		"CGO_ENABLED=0",
		"GOWORK=off",
		"GOFLAGS=",
	)
}

var toolchains struct {
	mu sync.Mutex
	m  map[string]string // go command + module root -> identity
}

// toolchainID returns what identifies the compiler Build runs: `go env` of
// GOVERSION, GOEXPERIMENT and GOWASM, asked in modRoot so that a toolchain
// switch requested by its go.mod shows. It is remembered per process.
func toolchainID(ctx context.Context, goCmd, modRoot string, env []string) (string, error) {
	memo := goCmd + "\x00" + modRoot
	toolchains.mu.Lock()
	id, ok := toolchains.m[memo]
	toolchains.mu.Unlock()
	if ok {
		return id, nil
	}
	cmd := exec.CommandContext(ctx, goCmd, "env", "GOVERSION", "GOEXPERIMENT", "GOWASM")
	cmd.Dir = modRoot
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("asking %s for its version: %w: %s", goCmd, err, bytes.TrimSpace(stderr.Bytes()))
	}
	id = string(bytes.TrimSpace(stdout))
	toolchains.mu.Lock()
	if toolchains.m == nil {
		toolchains.m = make(map[string]string)
	}
	toolchains.m[memo] = id
	toolchains.mu.Unlock()
	return id, nil
}

// cacheKey hashes the inputs of a build (see Build) into a hex string.
func cacheKey(toolchain string, args []string, pkg string, mdDoc []byte, modRoot, src string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%q\x00%s\x00", keyVersion, toolchain, args, pkg)
	writeBlob(h, mdDoc)

	roots := append([]string{modRoot}, localReplacements(modRoot)...)
	for _, root := range roots {
		if err := hashTree(h, root, src); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// hashTree hashes the files of the module at root that a build of the policy
// in src can read: everything but tests, hidden files, nested modules and the
// directories of other policies.
func hashTree(h io.Writer, root, src string) error {
	otherPolicy := map[string]bool{} // directory -> holds another policy
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module is not part of this one
			}
			if path != src {
				_, err := os.Stat(filepath.Join(path, metadataFile))
				otherPolicy[path] = err == nil
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
			strings.HasSuffix(name, "_test.go") || otherPolicy[filepath.Dir(path)] {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		writeBlob(h, []byte(filepath.ToSlash(rel)))
		writeBlob(h, data)
		return nil
	})
}

// localReplacements returns the directories that the go.mod in modRoot
// replaces modules with (replace X => ../dir): their sources are part of the
// build too.
func localReplacements(modRoot string) []string {
	doc, err := os.ReadFile(filepath.Join(modRoot, "go.mod"))
	if err != nil {
		return nil
	}
	var dirs []string
	for _, line := range strings.Split(string(doc), "\n") {
		_, target, ok := strings.Cut(line, "=>")
		if !ok {
			continue
		}
		fields := strings.Fields(target)
		if len(fields) == 1 && (strings.HasPrefix(fields[0], ".") || filepath.IsAbs(fields[0])) {
			dir := fields[0]
			if !filepath.IsAbs(dir) {
				dir = filepath.Join(modRoot, dir)
			}
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// writeBlob writes b to w prefixed by its length, so that concatenations of
// blobs hash unambiguously.
func writeBlob(w io.Writer, b []byte) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	w.Write(n[:])
	w.Write(b)
}

var keyLocks struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// lockKey serialises the builds of one output path in this process. It gives
// up when ctx is done.
func lockKey(ctx context.Context, path string) (release func(), err error) {
	keyLocks.mu.Lock()
	if keyLocks.m == nil {
		keyLocks.m = make(map[string]chan struct{})
	}
	ch, ok := keyLocks.m[path]
	if !ok {
		ch = make(chan struct{}, 1)
		keyLocks.m[path] = ch
	}
	keyLocks.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// moduleRoot returns the nearest directory at or above dir with a go.mod.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod at or above %s", dir)
		}
		d = parent
	}
}

func (o Options) goCommand() (string, error) {
	if o.Go != "" {
		return o.Go, nil
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	//lint:ignore SA1019 the tests that build policies run where they were built: the toolchain that built them is the one to use when go is not in PATH
	if root := runtime.GOROOT(); root != "" {
		p := filepath.Join(root, "bin", "go")
		if runtime.GOOS == "windows" {
			p += ".exe"
		}
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no go command: put go on PATH or set Options.Go")
}

func (o Options) cacheDir() (string, error) {
	if o.CacheDir != "" {
		return o.CacheDir, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locating the policy cache: %w", err)
	}
	return filepath.Join(dir, "warden", "policybuild"), nil
}
