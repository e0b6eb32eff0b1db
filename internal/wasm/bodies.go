package wasm

import (
	"reflect"
	"unsafe"

	"github.com/tetratelabs/wazero"
)

// wazero keeps the body of every function (its wasm instructions) in the
// compiled module for as long as the module lives, though only compiling
// and validating read them: about 1.8 MB of Go heap for a module built with
// stock Go, 14 MB of an idle server's 58 MB with 20 policies over 8 modules.
// dropFunctionBodies lets them go once the module is compiled. wazero has no
// option for it, so it reaches them by reflection, through unexported fields
// of wazero v1.12.0 (compiledModule.module, then wasm.Module.CodeSection[i].Body);
// machine code, source offsets (BodyOffsetInCodeSection) and everything
// instantiation reads are left as they are. With another layout it changes
// nothing and says so, and TestDropFunctionBodies fails, so a wazero
// upgrade that moves the fields is caught by the tests, not by users.

// dropFunctionBodies frees the function bodies of cm, a module compiled by
// this package that nothing has instantiated or compiled from yet, and
// reports whether it could.
func dropFunctionBodies(cm wazero.CompiledModule) bool {
	bodies, ok := functionBodies(cm)
	for _, body := range bodies {
		*body = nil
	}
	return ok
}

// functionBodies returns where cm keeps the body of each of its functions,
// or false when wazero is not laid out as this file expects.
func functionBodies(cm wazero.CompiledModule) ([]*[]byte, bool) {
	v := reflect.ValueOf(cm)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	mod := v.Elem().FieldByName("module")
	if mod.Kind() != reflect.Pointer || mod.IsNil() || mod.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	code := mod.Elem().FieldByName("CodeSection")
	if code.Kind() != reflect.Slice || code.Type().Elem().Kind() != reflect.Struct {
		return nil, false
	}
	field, ok := code.Type().Elem().FieldByName("Body")
	if !ok || field.Type != reflect.TypeFor[[]byte]() {
		return nil, false
	}
	bodies := make([]*[]byte, code.Len())
	for i := range bodies {
		// The value was reached through an unexported field, so it cannot
		// be set through reflect; its address can.
		bodies[i] = (*[]byte)(unsafe.Pointer(code.Index(i).FieldByIndex(field.Index).UnsafeAddr()))
	}
	return bodies, true
}
