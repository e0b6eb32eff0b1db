package wasm

import (
	"cmp"
	"context"
	"os"
	"reflect"
	"slices"
	"sync"
	"unsafe"

	"github.com/tetratelabs/wazero"
)

// The machine code of a compiled module is moved into file mappings
// (codemap_linux.go). Where that code is can be read from the compiled
// module itself, so that compilations need not be told apart by the
// mappings they create, and can run at once. wazero has no API for it:
// moduleCode reaches it by reflection, through unexported fields of wazero
// v1.12.0's optimizing compiler (internal/engine/wazevo), as
// dropFunctionBodies reaches the function bodies (bodies.go). A module's
// code is in three kinds of executable memory, each mapped on its own by
// platform.MmapCodeSegment (an mmap of the length rounded up to pages, so
// never sharing a page with anything else):
//
//   - compiledModule.executables.executable, its functions;
//   - compiledModule.executables.entryPreambles, the entry preambles of its
//     function types;
//   - sharedFunctions.listenerTrampolines[&module.TypeSection[i]].executable,
//     the trampolines to the function listeners (yieldListeners), one
//     mapping for each function type of the module. They belong to the
//     engine, and are freed with it, not with the module.
//
// The compiled module wazero keeps is found in its engine's
// compiledModules, by the module's ID, and the trampolines in the engine's
// sharedFunctions, by type: both maps are read under the engine's own lock,
// which compilations take to write them. The engine's functions shared by
// every module (sharedFunctions.executable) are mapped when the runtime is
// created, and stay where they are, as before.
//
// With another layout (a wazero upgrade, or the interpreter on another
// architecture) moduleCode reports it, compilations go back to telling
// their code apart by its mappings, one at a time, and TestModuleCode
// fails, so that the upgrade is caught by the tests, not by users.

// codeRegion is an address range of the process: a mapping of
// /proc/self/maps, or some pages of one.
type codeRegion struct{ start, end uintptr }

// codeLayout records whether wazero is laid out as moduleCode expects. The
// answer is the same for every runtime of the process.
var codeLayout struct {
	sync.Mutex
	checked, ok bool
}

// codeFoundByAddress reports whether the machine code of the modules rt
// compiles is found by moduleCode. The first call asks moduleCode about a
// module without code, compiled for the purpose, unless rt cannot compile
// it (a closed runtime: then the next call asks).
func codeFoundByAddress(ctx context.Context, rt wazero.Runtime) bool {
	codeLayout.Lock()
	defer codeLayout.Unlock()
	if !codeLayout.checked {
		probe, err := rt.NewHostModuleBuilder("warden-code-layout").Compile(ctx)
		if err != nil {
			return false
		}
		_, _, codeLayout.ok = moduleCode(probe)
		codeLayout.checked = true
		_ = probe.Close(ctx)
	}
	return codeLayout.ok
}

// codeNotFoundByAddress records that moduleCode could not read a module
// that codeFoundByAddress said it could: later compilations tell their code
// apart by its mappings.
func codeNotFoundByAddress() {
	codeLayout.Lock()
	defer codeLayout.Unlock()
	codeLayout.checked, codeLayout.ok = true, false
}

// moduleCode returns the pages of the machine code wazero mapped for cm, in
// address order, adjacent ones joined. fresh is false when the engine held
// the module before cm was compiled (another CompiledModule of the same
// bytes): its code is not cm's alone; and when the engine holds it no more
// (closed). ok is false when wazero is not laid out as this file expects.
func moduleCode(cm wazero.CompiledModule) (code []codeRegion, fresh, ok bool) {
	v := reflect.ValueOf(cm)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, false, false
	}
	mod := v.Elem().FieldByName("module")
	eng := v.Elem().FieldByName("compiledEngine")
	if mod.Kind() != reflect.Pointer || mod.IsNil() || eng.Kind() != reflect.Interface || eng.IsNil() {
		return nil, false, false
	}
	eng = eng.Elem()
	if eng.Kind() != reflect.Pointer || eng.IsNil() || !engineLaidOut(eng.Type(), mod.Type()) {
		return nil, false, false
	}
	mod, eng = mod.Elem(), eng.Elem()

	// The maps are written under the engine's lock, by other compilations
	// too. A value reached through unexported fields cannot be used as a
	// lock through reflect; its address can.
	lock := (*sync.RWMutex)(unsafe.Pointer(eng.FieldByName("mux").UnsafeAddr()))
	lock.RLock()
	defer lock.RUnlock()
	counted := eng.FieldByName("compiledModules").MapIndex(mod.FieldByName("ID"))
	shared := eng.FieldByName("sharedFunctions")
	if !counted.IsValid() || counted.IsNil() || shared.IsNil() {
		return nil, false, true // closed
	}
	compiled := counted.Elem().FieldByName("compiledModule")
	if compiled.IsNil() || compiled.Elem().FieldByName("executables").IsNil() {
		return nil, false, true
	}
	exec := compiled.Elem().FieldByName("executables").Elem()
	pieces := []reflect.Value{exec.FieldByName("executable"), exec.FieldByName("entryPreambles")}
	types := mod.FieldByName("TypeSection")
	trampolines := shared.Elem().FieldByName("listenerTrampolines")
	for i := range types.Len() {
		// The key, reached through unexported fields, is made anew at its
		// address so that reflect lets it be used.
		key := reflect.NewAt(types.Type().Elem(), unsafe.Pointer(types.Index(i).UnsafeAddr()))
		if t := trampolines.MapIndex(key); t.IsValid() { // else the module has no listener
			pieces = append(pieces, t.FieldByName("executable"))
		}
	}
	var regions []codeRegion
	for _, b := range pieces {
		r, ok := pagesOf(b)
		if !ok {
			return nil, false, false
		}
		regions = append(regions, r...)
	}
	return joinRegions(regions), counted.Elem().FieldByName("refCount").Int() == 1, true
}

// engineLaidOut reports whether engine, the type of wazero's engine, and
// module, that of its modules, have the fields moduleCode reads, of the
// types it reads them as.
func engineLaidOut(engine, module reflect.Type) bool {
	bytes := reflect.TypeFor[[]byte]()
	id, ok1 := fieldType(module, "ID")
	types, ok2 := fieldType(module, "TypeSection")
	mux, ok3 := fieldType(engine, "mux")
	modules, ok4 := fieldType(engine, "compiledModules")
	trampolines, ok5 := fieldType(engine, "sharedFunctions", "listenerTrampolines")
	refs, ok6 := fieldType(engine, "compiledModules", "refCount")
	exec, ok7 := fieldType(engine, "compiledModules", "compiledModule", "executables", "executable")
	preambles, ok8 := fieldType(engine, "compiledModules", "compiledModule", "executables", "entryPreambles")
	trampoline, ok9 := fieldType(engine, "sharedFunctions", "listenerTrampolines", "executable")
	// What moduleCode asks whether it is nil is a pointer.
	shared, ok10 := fieldType(engine, "sharedFunctions")
	compiled, ok11 := fieldType(engine, "compiledModules", "compiledModule")
	executables, ok12 := fieldType(engine, "compiledModules", "compiledModule", "executables")
	return ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8 && ok9 && ok10 && ok11 && ok12 &&
		id.Kind() == reflect.Array && types.Kind() == reflect.Slice &&
		mux == reflect.TypeFor[sync.RWMutex]() &&
		modules.Kind() == reflect.Map && modules.Key() == id && modules.Elem().Kind() == reflect.Pointer &&
		trampolines.Kind() == reflect.Map && trampolines.Key() == reflect.PointerTo(types.Elem()) &&
		trampolines.Elem().Kind() == reflect.Struct &&
		shared.Kind() == reflect.Pointer && compiled.Kind() == reflect.Pointer && executables.Kind() == reflect.Pointer &&
		refs.Kind() == reflect.Int && exec == bytes && preambles == bytes && trampoline == bytes
}

// fieldType returns the type of the field reached from t by names, each
// the name of a field of the struct the previous one is, points to, or
// maps to.
func fieldType(t reflect.Type, names ...string) (reflect.Type, bool) {
	for _, name := range names {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		f, ok := t.FieldByName(name)
		if !ok {
			return nil, false
		}
		t = f.Type
	}
	return t, true
}

// pagesOf returns the pages of b, a []byte that MmapCodeSegment mapped
// (none when it is empty), or false when b is not a []byte or does not
// start a page.
func pagesOf(b reflect.Value) ([]codeRegion, bool) {
	if !b.IsValid() || b.Type() != reflect.TypeFor[[]byte]() {
		return nil, false
	}
	if b.Len() == 0 {
		return nil, true
	}
	page := uintptr(os.Getpagesize())
	start := b.Pointer()
	if start%page != 0 {
		return nil, false
	}
	return []codeRegion{{start, start + (uintptr(b.Cap())+page-1)&^(page-1)}}, true
}

// joinRegions sorts regions and joins those that touch.
func joinRegions(regions []codeRegion) []codeRegion {
	slices.SortFunc(regions, func(a, b codeRegion) int { return cmp.Compare(a.start, b.start) })
	var out []codeRegion
	for _, r := range regions {
		if n := len(out); n > 0 && out[n-1].end == r.start {
			out[n-1].end = r.end
			continue
		}
		out = append(out, r)
	}
	return out
}
