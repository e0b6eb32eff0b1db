package wasm_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
)

func readPolicy(t testing.TB, policy string) []byte {
	t.Helper()
	b, err := os.ReadFile(policybuild.ForTest(t, policy))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// compileOnce compiles module in a runtime of its own with the cache in
// dir, and closes it: the cache then holds the module's code.
func compileOnce(t *testing.T, dir string, module []byte) {
	t.Helper()
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	if _, err := rt.Compile(context.Background(), module); err != nil {
		t.Fatal(err)
	}
}

func testLogger(logs *logtest.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestCacheFilesAreInWazeroCacheSubdir(t *testing.T) {
	skipUnderRace(t)
	dir := t.TempDir()
	compileOnce(t, dir, readPolicy(t, "labels"))
	files := privateFiles(t, dir)
	if len(files) == 0 {
		t.Fatal("the cache holds no file")
	}
	for name := range files {
		if !strings.HasPrefix(name, wasm.WazeroCacheSubdir()+"/") {
			t.Errorf("cache file %s is outside %s", name, wasm.WazeroCacheSubdir())
		}
	}
}

// TestCorruptCacheEntry damages the cached code of a module, as a crash
// mid-write or a bad disk would: a new runtime on the same directory
// compiles the module again, it runs, and the cache holds good code again.
func TestCorruptCacheEntry(t *testing.T) {
	skipUnderRace(t)
	module := readPolicy(t, "labels")
	tests := []struct {
		name    string
		corrupt func([]byte) []byte
	}{
		{name: "empty", corrupt: func([]byte) []byte { return nil }}, // error reading header: EOF
		{name: "truncated", corrupt: func(b []byte) []byte { return b[:len(b)/2] }},
		{name: "flipped byte", corrupt: func(b []byte) []byte { // checksum mismatch
			b = append([]byte(nil), b...)
			b[len(b)/2] ^= 0xff
			return b
		}},
		{name: "garbage", corrupt: func(b []byte) []byte { return []byte(strings.Repeat("garbage", 10)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			compileOnce(t, dir, module)
			files := privateFiles(t, dir)
			if len(files) == 0 {
				t.Fatal("the cache holds no file")
			}
			for name, b := range files {
				if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), tt.corrupt(b), 0o600); err != nil {
					t.Fatal(err)
				}
			}

			var logs logtest.Buffer
			rt := newRuntime(t, wasm.Config{CacheDir: dir, Logger: testLogger(&logs)})
			assertValidates(t, newWapcOf(t, rt, module))
			if !strings.Contains(logs.String(), "compiling again") {
				t.Errorf("no warning about the cache; log:\n%s", logs.String())
			}

			// The entry was written again, whole: the next runtime
			// takes it from the cache without a warning.
			logs.Reset()
			again := newRuntime(t, wasm.Config{CacheDir: dir, Logger: testLogger(&logs)})
			assertValidates(t, newWapcOf(t, again, module))
			if strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("the cache was not repaired; log:\n%s", logs.String())
			}
			if got := privateFiles(t, dir); len(got) != len(files) {
				t.Errorf("the cache holds %d files, want %d", len(got), len(files))
			}
		})
	}
}

// TestUnusableCacheDir gives the runtime a cache directory it cannot use:
// it warns and runs without a cache.
func TestUnusableCacheDir(t *testing.T) {
	skipUnderRace(t)
	module := readPolicy(t, "labels")
	// readOnly makes dirs read-only, and skips the test when that does not
	// stop writes (root).
	readOnly := func(t *testing.T, dirs ...string) {
		t.Helper()
		for _, d := range dirs {
			if err := os.Chmod(d, 0o500); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(d, 0o700) })
		}
		if f, err := os.CreateTemp(dirs[0], "probe"); err == nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			t.Skip("a read-only directory is writable here (running as root?)")
		}
	}
	tests := []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{name: "a regular file", dir: func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "cache")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}},
		{name: "cannot be created", dir: func(t *testing.T) string {
			if runtime.GOOS != "linux" {
				t.Skip("needs /proc")
			}
			return "/proc/self/warden-cache" // not even root can create it
		}},
		{name: "in a read-only directory", dir: func(t *testing.T) string {
			parent := t.TempDir()
			readOnly(t, parent)
			return filepath.Join(parent, "cache")
		}},
		{name: "read-only", dir: func(t *testing.T) string {
			dir := t.TempDir()
			readOnly(t, dir)
			return dir
		}},
		{name: "read-only, filled earlier", dir: func(t *testing.T) string {
			dir := t.TempDir()
			compileOnce(t, dir, readPolicy(t, "counter"))
			readOnly(t, dir, filepath.Join(dir, wasm.WazeroCacheSubdir()))
			return dir
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir(t)
			var logs logtest.Buffer
			rt := newRuntime(t, wasm.Config{CacheDir: dir, Logger: testLogger(&logs)})
			assertValidates(t, newWapcOf(t, rt, module))
			if !strings.Contains(logs.String(), "not cached") {
				t.Errorf("no warning about the cache directory; log:\n%s", logs.String())
			}
		})
	}
}

// skipUnderRace skips a test of the files around compilation, which
// compiles modules again and again: under the race detector (.ci/run runs
// this package with it, for the memory the runtime shares with the kernel)
// it costs minutes and checks no memory sharing.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("compiles repeatedly; run without -race")
	}
}
