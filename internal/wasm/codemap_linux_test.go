//go:build linux

package wasm_test

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
)

// mapping is one entry of /proc/self/smaps.
type mapping struct {
	perms, path string
	rssKB       int
}

func smaps(t *testing.T) map[string]mapping {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]mapping{}
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && len(fields[1]) == 4:
			cur = fields[0]
			out[cur] = mapping{perms: fields[1], path: strings.Join(fields[5:], " ")}
		case len(fields) >= 2 && fields[0] == "Rss:":
			m := out[cur]
			m.rssKB, _ = strconv.Atoi(fields[1])
			out[cur] = m
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// anonExecPages returns the addresses of the pages of anonymous executable
// memory. Pages, not mappings: the kernel merges adjacent mappings and
// splits them when part is unmapped (wazero unmaps code from finalizers), so
// a mapping may be new while none of its pages is.
func anonExecPages(t *testing.T, maps map[string]mapping) map[uint64]bool {
	t.Helper()
	pages := map[uint64]bool{}
	for addr, m := range maps {
		if m.perms != "r-xp" || m.path != "" {
			continue
		}
		start, end, _ := strings.Cut(addr, "-")
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad mapping address %q", addr)
		}
		for p := s; p < e; p += uint64(os.Getpagesize()) {
			pages[p] = true
		}
	}
	return pages
}

// Not parallel: it reads the process's mappings, which parallel tests
// change.
func TestMachineCodeIsFileBacked(t *testing.T) {
	forEachCodeFinder(t, testMachineCodeIsFileBacked)
}

// forEachCodeFinder runs test with the machine code of compilations found
// from the compiled module (codeaddr.go), and by the mappings each
// compilation creates, as with a wazero laid out otherwise.
func forEachCodeFinder(t *testing.T, test func(*testing.T)) {
	for _, tc := range []struct {
		name string
		set  func(testing.TB)
	}{
		{"found from the module", func(testing.TB) {}},
		{"found by its mappings", wasm.FindCodeByMappings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.set(t)
			test(t)
		})
	}
}

func testMachineCodeIsFileBacked(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, wasm.Config{})
	before := anonExecPages(t, smaps(t))
	w := newWapc(t, rt, "labels")

	maps := smaps(t)
	for page := range anonExecPages(t, maps) {
		if !before[page] {
			t.Errorf("compiling left anonymous machine code at %x", page)
		}
	}
	regions := wasm.CodeRegions(rt)
	if len(regions) == 0 {
		t.Fatal("no machine code moved into a file")
	}
	for _, addr := range regions {
		m, ok := maps[addr]
		if !ok || m.perms != "r-xp" || !strings.Contains(m.path, "warden-code-") || !strings.HasSuffix(m.path, "(deleted)") {
			t.Errorf("code at %s is mapped as %+v (present: %v), want an unlinked warden-code file", addr, m, ok)
		}
	}

	rt.ReleaseCode()
	maps = smaps(t)
	for _, addr := range regions {
		if rss := maps[addr].rssKB; rss != 0 {
			t.Errorf("code at %s keeps %d KiB resident after ReleaseCode", addr, rss)
		}
	}
	// The code pages come back from the file when the code runs.
	payload := []byte(`{"request":{"uid":"x","object":{"metadata":{"labels":{"a":"b"}}}},"settings":{"denied_labels":["a"]}}`)
	out, err := w.Call(ctx, nil, "validate", payload)
	if err != nil || !strings.Contains(string(out), `"accepted":false`) {
		t.Fatalf("validate after ReleaseCode: %s, %v", out, err)
	}
}

func TestMachineCodeStaysWhenItCannotBeMoved(t *testing.T) {
	forEachCodeFinder(t, testMachineCodeStaysWhenItCannotBeMoved)
}

func testMachineCodeStaysWhenItCannotBeMoved(t *testing.T) {
	var logs logtest.Buffer
	rt := newRuntime(t, wasm.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	wasm.SetCodeDir(rt, t.TempDir()+"/missing")
	w := newWapc(t, rt, "labels")
	if regions := wasm.CodeRegions(rt); len(regions) != 0 {
		t.Errorf("code moved into files in a missing directory: %v", regions)
	}
	if !strings.Contains(logs.String(), "machine code stays in anonymous memory") {
		t.Errorf("no warning logged; logs:\n%s", logs.String())
	}
	rt.ReleaseCode()
	payload := []byte(`{"request":{"uid":"x","object":{"metadata":{}}},"settings":{}}`)
	if out, err := w.Call(context.Background(), nil, "validate", payload); err != nil || !strings.Contains(string(out), `"accepted":true`) {
		t.Fatalf("validate: %s, %v", out, err)
	}
}

// TestConcurrentCompilesMoveTheirCode compiles distinct modules at once,
// with an empty cache and then from it: all their code ends in files. Not
// parallel: it reads the process's mappings.
func TestConcurrentCompilesMoveTheirCode(t *testing.T) {
	forEachCodeFinder(t, testConcurrentCompilesMoveTheirCode)
}

func testConcurrentCompilesMoveTheirCode(t *testing.T) {
	var modules [][]byte
	for _, policy := range []string{"labels", "counter", "wasi-log", "host-call"} {
		b, err := os.ReadFile(policybuild.ForTest(t, policy))
		if err != nil {
			t.Fatal(err)
		}
		modules = append(modules, b)
	}
	cache := t.TempDir()
	for _, run := range []string{"empty cache", "cached"} {
		rt := newRuntime(t, wasm.Config{CacheDir: cache})
		before := anonExecPages(t, smaps(t))
		errs := make(chan error, len(modules))
		for _, b := range modules {
			go func() {
				_, err := rt.Compile(t.Context(), b)
				errs <- err
			}()
		}
		for range modules {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", run, err)
			}
		}
		for page := range anonExecPages(t, smaps(t)) {
			if !before[page] {
				t.Errorf("%s: compiling left anonymous machine code at %x", run, page)
			}
		}
		if len(wasm.CodeRegions(rt)) < len(modules) {
			t.Errorf("%s: %d regions of code moved into files for %d modules", run, len(wasm.CodeRegions(rt)), len(modules))
		}
	}
}
