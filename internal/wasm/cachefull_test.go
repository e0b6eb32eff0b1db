package wasm_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
)

// TestCacheVolumeThatRefusesWrites gives the runtime a cache directory on
// which writes fail, as on a full volume, at start and once running: the
// runtime warns and compiles in memory, and the module runs.
//
// A test cannot fill a real volume here: a tiny tmpfs needs mount
// privileges, and a read-only directory does not stop root. So the checks
// run in a child process whose file size limit (RLIMIT_FSIZE) is 1 KiB:
// the kernel refuses every write past that size (EFBIG), as a full volume
// refuses it (ENOSPC), through the same write calls of wazero's cache.
func TestCacheVolumeThatRefusesWrites(t *testing.T) {
	skipUnderRace(t)
	if when := os.Getenv("WARDEN_CACHE_FULL_CHILD"); when != "" {
		cacheFullChild(t, when, os.Getenv("WARDEN_CACHE_FULL_MODULE"))
		return
	}
	module := policybuild.ForTest(t, "labels")
	for _, when := range []string{"at start", "once running"} {
		t.Run(when, func(t *testing.T) {
			// Bounds the child only.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCacheVolumeThatRefusesWrites$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "WARDEN_CACHE_FULL_CHILD="+when, "WARDEN_CACHE_FULL_MODULE="+module, "TMPDIR="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
		})
	}
}

func cacheFullChild(t *testing.T, when, modulePath string) {
	module, err := os.ReadFile(modulePath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The limit covers the cache's writes only: it is lifted before the
	// module runs, as its memory snapshot is a file too (a memfd), which a
	// full volume would not touch.
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	fill := func() {
		t.Helper()
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 1 << 10, Max: limit.Max}); err != nil {
			t.Skipf("cannot limit the file size: %v", err)
		}
	}
	if when == "at start" {
		fill()
	}
	var logs logtest.Buffer
	rt := newRuntime(t, wasm.Config{CacheDir: dir, Logger: testLogger(&logs)})
	if when != "at start" {
		fill()
	}
	m, err := rt.Compile(context.Background(), module)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("compiling with a cache that refuses writes: %v\nlog:\n%s", err, logs.String())
	}
	w, err := rt.NewWapc(context.Background(), m, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	out, err := w.Call(withTimeout(t, time.Minute), &recordingHost{}, "validate", []byte(podRequest))
	if err != nil || !strings.Contains(string(out), "label env is denied") {
		t.Fatalf("answer %s, error %v", out, err)
	}
	want := map[string]string{
		"at start":     "compiled modules are not cached: the cache directory is unusable",
		"once running": "the compilation cache cannot be written: compiling in memory from now on",
	}[when]
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs.String())
	}
}
