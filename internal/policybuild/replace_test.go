package policybuild

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCacheKeyCoversReplacedModules: a policy module that replaces a module
// with a local directory must be rebuilt when that directory changes.
func TestCacheKeyCoversReplacedModules(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("helpers/go.mod", "module example.test/helpers\n")
	write("helpers/h.go", "package helpers\n")
	write("policies/go.mod", "module example.test/policies\n\nrequire example.test/helpers v0.0.0\n\nreplace example.test/helpers => ../helpers\n")
	write("policies/p/main.go", "package main\n")
	modRoot, src := filepath.Join(dir, "policies"), filepath.Join(dir, "policies", "p")

	if got := localReplacements(modRoot); len(got) != 1 || got[0] != filepath.Join(dir, "helpers") {
		t.Fatalf("localReplacements = %q", got)
	}
	key := func() string {
		k, err := cacheKey("go1.26", nil, "./p", nil, modRoot, src)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	before := key()
	write("helpers/h.go", "package helpers\n\nconst Changed = true\n")
	if key() == before {
		t.Fatal("changing a replaced module did not change the cache key")
	}
}
