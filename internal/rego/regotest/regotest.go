// Package regotest compiles Rego to WebAssembly for tests, as
// `opa build -t wasm -e <entrypoint>` does, with OPA's Go packages. Only tests
// import it.
package regotest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/open-policy-agent/opa/v1/compile"
	"github.com/open-policy-agent/opa/v1/version"

	"github.com/wardenhq/warden/internal/metadata"
)

// keyVersion changes when the way a module is built from the same inputs
// changes, so that older cache entries are not reused.
const keyVersion = "regotest/2"

// Build compiles the Rego file at path (relative to the test's directory or
// absolute) with the given entrypoint, such as "policy/violation", and
// returns the policy.wasm of the bundle. Modules are cached under the user
// cache directory (the test's temporary directory when there is none), keyed
// by the OPA version, the entrypoint and the source. It is safe for
// concurrent use.
func Build(t testing.TB, path, entrypoint string) []byte {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, part := range []string{keyVersion, version.Version, entrypoint, filepath.Base(path)} {
		fmt.Fprintf(h, "%s\x00", part)
	}
	h.Write(src)
	dir := cacheDir(t)
	out := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:32]+".wasm")
	if b, err := os.ReadFile(out); err == nil {
		return b
	}
	b, err := build(path, entrypoint)
	if err != nil {
		t.Fatalf("compiling %s to wasm: %v", path, err)
	}
	// Written to a temporary file and renamed, so readers only ever see a
	// complete module.
	tmp, err := os.CreateTemp(dir, ".build-*")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		t.Fatal(err)
	}
	return b
}

func build(path, entrypoint string) ([]byte, error) {
	// Rego locations (in error messages) name the file only.
	c := compile.New().
		WithTarget(compile.TargetWasm).
		WithEntrypoints(entrypoint).
		WithFS(os.DirFS(filepath.Dir(path))).
		WithPaths(filepath.Base(path))
	if err := c.Build(context.Background()); err != nil {
		return nil, err
	}
	mods := c.Bundle().WasmModules
	if len(mods) != 1 {
		return nil, fmt.Errorf("the bundle has %d wasm modules, want 1", len(mods))
	}
	if !bytes.HasPrefix(mods[0].Raw, []byte("\x00asm")) {
		return nil, errors.New("the bundle's module is not wasm")
	}
	return mods[0].Raw, nil
}

func cacheDir(t testing.TB) string {
	if base, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(base, "warden", "regobuild")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			return dir
		}
	}
	return t.TempDir()
}

// ModuleFile builds the Rego file at path as Build does, embeds metadata
// with the execution mode (metadata.ModeOPA or metadata.ModeGatekeeper), as
// kwctl annotate would, and returns the file:// URL of the module, written
// in the test's temporary directory.
func ModuleFile(t testing.TB, path, entrypoint, mode string) string {
	t.Helper()
	annotated, err := metadata.Embed(Build(t, path, entrypoint), &metadata.Metadata{ExecutionMode: mode})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "policy.wasm")
	if err := os.WriteFile(out, annotated, 0o600); err != nil {
		t.Fatal(err)
	}
	return "file://" + out
}
