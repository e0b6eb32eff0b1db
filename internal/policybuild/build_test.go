package policybuild

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wardenhq/warden/internal/metadata"
)

// buildSlots bounds the concurrent go builds of the tests: each one already
// uses every core.
var buildSlots = make(chan struct{}, 2)

func TestBuildPolicies(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	policies := filepath.Join(root, "testdata", "policies")
	cache := t.TempDir()

	wapcHost := []string{"wapc", "wasi_snapshot_preview1"}
	wasiHost := []string{"host", "kubewarden:javy/host", "wasi_snapshot_preview1"}
	tests := []struct {
		name       string
		mode       string
		policyType string
		mutating   bool
		gcflags    string
	}{
		{name: "labels", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "mutate-labels", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes, mutating: true},
		{name: "raw", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeRaw},
		{name: "trap", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "loop", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "oom", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "garbage", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "echo", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "counter", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "wasi-log", mode: metadata.ModeWASI, policyType: metadata.PolicyTypeKubernetes},
		{name: "wasi-garbage", mode: metadata.ModeWASI, policyType: metadata.PolicyTypeKubernetes},
		{name: "wasi-fail", mode: metadata.ModeWASI, policyType: metadata.PolicyTypeKubernetes},
		{name: "wasi-javy-log", mode: metadata.ModeWASI, policyType: metadata.PolicyTypeKubernetes},
		{name: "wasi-counter", mode: metadata.ModeWASI, policyType: metadata.PolicyTypeKubernetes},
		{name: "wasi-nostdin", mode: metadata.ModeWASI, policyType: metadata.PolicyTypeKubernetes},
		{name: "host-call", mode: metadata.ModeWASI, policyType: metadata.PolicyTypeKubernetes},
		{name: "list-resources", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "hostile", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes},
		{name: "nowb", mode: metadata.ModeWapc, policyType: metadata.PolicyTypeKubernetes, gcflags: "all=-l -B -wb=false"},
		{name: "wasi-nowb", mode: metadata.ModeWASI, policyType: metadata.PolicyTypeKubernetes, gcflags: "all=-l -B -wb=false"},
	}

	t.Run("the table lists every policy", func(t *testing.T) {
		dirs, err := filepath.Glob(filepath.Join(policies, "*", metadataFile))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range dirs {
			names = append(names, filepath.Base(filepath.Dir(d)))
		}
		for _, tt := range tests {
			if !slices.Contains(names, tt.name) {
				t.Errorf("policy %s is in the table but not in %s", tt.name, policies)
			}
			names = slices.DeleteFunc(names, func(n string) bool { return n == tt.name })
		}
		if len(names) > 0 {
			t.Errorf("policies missing from the table: %v", names)
		}
	})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			buildSlots <- struct{}{}
			defer func() { <-buildSlots }()

			src := filepath.Join(policies, tt.name)
			path, err := Build(t.Context(), src, Options{CacheDir: cache, GCFlags: tt.gcflags})
			if err != nil {
				t.Fatal(err)
			}
			module, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			md, err := metadata.FromModule(module)
			if err != nil {
				t.Fatal(err)
			}
			wantProtocol, wantImports, wantExports := "", wasiHost, []string{"_start"}
			if tt.mode == metadata.ModeWapc {
				wantProtocol, wantImports, wantExports = metadata.ProtocolV1, wapcHost, []string{"__guest_call", "_initialize"}
			}
			if md.Mode() != tt.mode || md.ProtocolVersion != wantProtocol || md.Type() != tt.policyType || md.Mutating != tt.mutating {
				t.Errorf("metadata: mode %q, protocol %q, type %q, mutating %v; want %q, %q, %q, %v",
					md.Mode(), md.ProtocolVersion, md.Type(), md.Mutating, tt.mode, wantProtocol, tt.policyType, tt.mutating)
			}
			if got := md.Annotations["io.kubewarden.policy.title"]; got != tt.name {
				t.Errorf("title annotation = %q, want %q", got, tt.name)
			}

			imports, exports, err := importsAndExports(module)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range imports {
				if !slices.Contains(wantImports, m) {
					t.Errorf("imports from module %q, which a %s host does not provide", m, tt.mode)
				}
			}
			for _, e := range wantExports {
				if !slices.Contains(exports, e) {
					t.Errorf("exports %v, want %s among them", exports, e)
				}
			}

			before, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Build(t.Context(), src, Options{CacheDir: cache, GCFlags: tt.gcflags})
			if err != nil {
				t.Fatal(err)
			}
			after, err := os.Stat(again)
			if err != nil {
				t.Fatal(err)
			}
			if again != path || !after.ModTime().Equal(before.ModTime()) {
				t.Errorf("second Build = %s (mtime %v), want the cached %s (mtime %v)", again, after.ModTime(), path, before.ModTime())
			}
		})
	}
}

// writeModule writes files (slash paths relative to a new directory, which
// gets a go.mod) and returns the directory.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module policybuild.test/m\n\ngo 1.26\n"
	for name, content := range files {
		writeFile(t, filepath.Join(dir, filepath.FromSlash(name)), content)
	}
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	emptyMain = "package main\n\nfunc main() {}\n"
	wapcMeta  = "mutating: false\nexecutionMode: kubewarden-wapc\n" // no protocolVersion: Build fills it
	wasiMeta  = "mutating: false\nexecutionMode: wasi\n"
)

func TestBuildErrors(t *testing.T) {
	mod := writeModule(t, map[string]string{
		"nometa/main.go":       emptyMain,
		"opa/main.go":          emptyMain,
		"opa/metadata.yml":     "mutating: false\nexecutionMode: opa\n",
		"broken/main.go":       "package main\n\nfunc main() { undefinedThing() }\n",
		"broken/metadata.yml":  wasiMeta,
		"badyaml/main.go":      emptyMain,
		"badyaml/metadata.yml": "mutating: [\n",
	})
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "main.go"), emptyMain)
	writeFile(t, filepath.Join(outside, metadataFile), wasiMeta)

	tests := []struct {
		name    string
		src     string
		wantIs  error
		wantMsg string
	}{
		{name: "no metadata.yml", src: filepath.Join(mod, "nometa"), wantIs: fs.ErrNotExist, wantMsg: "reading policy metadata: open " + filepath.Join(mod, "nometa", metadataFile)},
		{name: "no such directory", src: filepath.Join(mod, "absent"), wantIs: fs.ErrNotExist, wantMsg: "reading policy metadata"},
		{name: "unbuildable mode", src: filepath.Join(mod, "opa"), wantMsg: `execution mode "opa" cannot be built from Go`},
		{name: "bad metadata", src: filepath.Join(mod, "badyaml"), wantMsg: "decoding metadata"},
		{name: "compile error", src: filepath.Join(mod, "broken"), wantMsg: "undefined: undefinedThing"},
	}
	if _, err := moduleRoot(outside); err != nil { // only when no go.mod is above the temporary directory
		tests = append(tests, struct {
			name    string
			src     string
			wantIs  error
			wantMsg string
		}{name: "no module", src: outside, wantMsg: "no go.mod at or above " + outside})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(t.Context(), tt.src, Options{CacheDir: t.TempDir()})
			if err == nil {
				t.Fatal("Build succeeded, want an error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestBuildCache(t *testing.T) {
	mod := writeModule(t, map[string]string{
		"lib/lib.go":         "package lib\n\nconst Name = \"a\"\n",
		"p/main.go":          "package main\n\nimport \"policybuild.test/m/lib\"\n\nfunc main() { println(lib.Name) }\n",
		"p/metadata.yml":     wapcMeta,
		"other/main.go":      emptyMain,
		"other/metadata.yml": wasiMeta,
	})
	src := filepath.Join(mod, "p")
	opts := Options{CacheDir: t.TempDir()}

	// build builds p and reports the path and how many go builds it ran.
	build := func(t *testing.T) (string, int64) {
		t.Helper()
		n := buildCount.Load()
		path, err := Build(t.Context(), src, opts)
		if err != nil {
			t.Fatal(err)
		}
		return path, buildCount.Load() - n
	}

	first, builds := build(t)
	if builds != 1 {
		t.Fatalf("first Build ran %d go builds, want 1", builds)
	}
	module, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.FromModule(module)
	if err != nil {
		t.Fatal(err)
	}
	if md.ProtocolVersion != metadata.ProtocolV1 {
		t.Errorf("protocolVersion = %q, want %q filled in", md.ProtocolVersion, metadata.ProtocolV1)
	}

	steps := []struct {
		name      string
		edit      func(t *testing.T)
		wantBuild bool
	}{
		{name: "nothing changed", edit: func(*testing.T) {}},
		{name: "another policy changed", edit: func(t *testing.T) {
			writeFile(t, filepath.Join(mod, "other", "main.go"), emptyMain+"\n// edited\n")
		}},
		{name: "a test file changed", edit: func(t *testing.T) {
			writeFile(t, filepath.Join(mod, "lib", "lib_test.go"), "package lib\n")
		}},
		{name: "the policy changed", wantBuild: true, edit: func(t *testing.T) {
			writeFile(t, filepath.Join(src, "main.go"), "package main\n\nimport \"policybuild.test/m/lib\"\n\nfunc main() { println(lib.Name, 1) }\n")
		}},
		{name: "a package it imports changed", wantBuild: true, edit: func(t *testing.T) {
			writeFile(t, filepath.Join(mod, "lib", "lib.go"), "package lib\n\nconst Name = \"b\"\n")
		}},
		{name: "its metadata changed", wantBuild: true, edit: func(t *testing.T) {
			writeFile(t, filepath.Join(src, metadataFile), wapcMeta+"backgroundAudit: false\n")
		}},
		{name: "the default gcflags spelled out", edit: func(*testing.T) { opts.GCFlags = "all=-B" }},
		{name: "other gcflags", wantBuild: true, edit: func(*testing.T) { opts.GCFlags = "all=-l -B -wb=false" }},
	}
	prev := first
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.edit(t)
			path, builds := build(t)
			if step.wantBuild {
				if builds != 1 || path == prev {
					t.Errorf("Build ran %d go builds and returned %s (before: %s), want 1 build and a new path", builds, path, prev)
				}
			} else if builds != 0 || path != prev {
				t.Errorf("Build ran %d go builds and returned %s, want a cache hit on %s", builds, path, prev)
			}
			prev = path
		})
	}

	t.Run("concurrent builds of one key build once", func(t *testing.T) {
		writeFile(t, filepath.Join(src, "main.go"), "package main\n\nfunc main() { println(2) }\n")
		n := buildCount.Load()
		var wg sync.WaitGroup
		paths := make([]string, 4)
		errs := make([]error, len(paths))
		for i := range paths {
			wg.Go(func() { paths[i], errs[i] = Build(context.Background(), src, opts) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if builds := buildCount.Load() - n; builds != 1 {
			t.Errorf("%d concurrent Builds ran %d go builds, want 1", len(paths), builds)
		}
		for _, p := range paths[1:] {
			if p != paths[0] {
				t.Errorf("concurrent Builds returned %v, want one path", paths)
				break
			}
		}
	})

	t.Run("no temporary files are left", func(t *testing.T) {
		entries, err := os.ReadDir(opts.CacheDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".wasm") || strings.HasPrefix(e.Name(), ".") {
				t.Errorf("cache holds %s", e.Name())
			}
		}
	})
}

func TestModulePath(t *testing.T) {
	tests := []struct {
		gomod, want string
	}{
		{"module github.com/wardenhq/warden\n\ngo 1.26.8\n", "github.com/wardenhq/warden"},
		{"// comment\nmodule \"warden.test/policies\" // trailing\n", "warden.test/policies"},
		{"go 1.26\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := modulePath([]byte(tt.gomod)); got != tt.want {
				t.Errorf("modulePath(%q) = %q, want %q", tt.gomod, got, tt.want)
			}
		})
	}
}

func TestForTest(t *testing.T) {
	path := ForTest(t, "garbage")
	module, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.FromModule(module)
	if err != nil {
		t.Fatal(err)
	}
	if md.Mode() != metadata.ModeWapc {
		t.Errorf("mode = %q, want %q", md.Mode(), metadata.ModeWapc)
	}
}
