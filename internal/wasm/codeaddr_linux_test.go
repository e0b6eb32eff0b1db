//go:build linux

package wasm

import (
	"os"
	"runtime"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// twoTypes is a module with two function types and a function of each.
var twoTypes = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x09, 0x02, 0x60, 0x00, 0x00, 0x60, 0x01, 0x7f, 0x01, 0x7f, // types: () -> (), (i32) -> i32
	0x03, 0x03, 0x02, 0x00, 0x01, // functions
	0x0a, 0x09, 0x02, 0x02, 0x00, 0x0b, 0x04, 0x00, 0x20, 0x00, 0x0b, // code: nothing, local.get 0
}

// TestModuleCode checks that moduleCode finds the machine code wazero maps
// for a module (its functions, its entry preambles and its listener
// trampolines are each mapped on their own): anonymous executable pages,
// which the module's compilation added. It fails when a wazero upgrade
// moves the fields moduleCode reads (codeaddr.go).
func TestModuleCode(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("wazero has no compiler for", runtime.GOARCH)
	}
	ctx := experimental.WithFunctionListenerFactory(t.Context(), yieldListeners{})
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	// Not parallel, and under compileMu and codeMu, which keep other
	// tests' code from appearing meanwhile.
	compileMu.Lock()
	codeMu.Lock()
	before := anonExecPages(t)
	cm, err := rt.CompileModule(ctx, twoTypes)
	after := anonExecPages(t)
	codeMu.Unlock()
	compileMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close(ctx)
	code, fresh, ok := moduleCode(cm)
	if !ok {
		t.Fatal("wazero's compiled module is not laid out as moduleCode expects (codeaddr.go)")
	}
	if !fresh {
		t.Error("the code of a module compiled once is said to be shared")
	}
	found := map[uintptr]bool{}
	page := uintptr(os.Getpagesize())
	for _, r := range code {
		for p := r.start; p < r.end; p += page {
			found[p] = true
			if !after[p] || before[p] {
				t.Errorf("page %x of the module's code is not an anonymous executable page its compilation added", p)
			}
		}
	}
	// Functions, preambles and two trampolines: four mappings of a page.
	if len(found) != 4 {
		t.Errorf("moduleCode found %d pages of code, want 4: %x", len(found), code)
	}
	for p := range after {
		if !before[p] && !found[p] {
			t.Errorf("moduleCode missed the page of code at %x", p)
		}
	}

	// The same bytes compiled again share the engine's module and its code
	// (but for the listener trampolines, which wazero makes for the types
	// of the module it compiles only).
	again, err := rt.CompileModule(ctx, twoTypes)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	code2, fresh, ok := moduleCode(again)
	if !ok || fresh {
		t.Errorf("the module compiled again: fresh %v, ok %v; want ok, not fresh", fresh, ok)
	}
	for _, r := range code2 {
		for p := r.start; p < r.end; p += page {
			if !found[p] {
				t.Errorf("the module compiled again has code at %x, not the first's", p)
			}
		}
	}
}

// TestModuleCodeOtherLayout checks that moduleCode reports what it cannot
// read: the interpreter's compiled modules.
func TestModuleCodeOtherLayout(t *testing.T) {
	ctx := t.Context()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, twoTypes)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := moduleCode(cm); ok {
		t.Error("moduleCode read an interpreter's compiled module")
	}
	if _, _, ok := moduleCode(nil); ok {
		t.Error("moduleCode read a nil module")
	}
}

// anonExecPages returns the pages of the process's anonymous executable
// mappings.
func anonExecPages(t *testing.T) map[uintptr]bool {
	t.Helper()
	mappings, err := anonExecMappings()
	if err != nil {
		t.Fatal(err)
	}
	pages := map[uintptr]bool{}
	page := uintptr(os.Getpagesize())
	for _, m := range mappings {
		for p := m.start; p < m.end; p += page {
			pages[p] = true
		}
	}
	return pages
}

// TestColdGate checks that a compilation waits for coldCompiles when
// wazero compiles the module, and not when it reads it from its cache.
func TestColdGate(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("wazero has no compiler for", runtime.GOARCH)
	}
	ctx := t.Context()
	cache, err := wazero.NewCompilationCacheWithDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close(ctx)
	for _, tc := range []struct {
		name string
		held bool
	}{
		{"compiled", true},
		{"read from the cache", false},
	} {
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache))
		g := &coldGate{Context: ctx}
		cm, err := rt.CompileModule(g, twoTypes)
		held := g.held
		g.release()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if held != tc.held {
			t.Errorf("%s: coldCompiles held %v, want %v", tc.name, held, tc.held)
		}
		_ = cm.Close(ctx)
		_ = rt.Close(ctx)
	}
}
