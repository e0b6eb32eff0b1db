package wasm

import (
	"reflect"
	"unsafe"
)

// FunctionBodyBytes returns how many functions m's compiled module lists
// and the bytes of wasm code it still holds for them, read through the same
// fields of wazero that dropFunctionBodies clears; ok is false when wazero
// is not laid out that way.
func FunctionBodyBytes(m *Module) (functions, bytes int, ok bool) {
	v := reflect.ValueOf(m.compiled)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0, 0, false
	}
	mod := v.Elem().FieldByName("module")
	if mod.Kind() != reflect.Pointer || mod.IsNil() {
		return 0, 0, false
	}
	code := mod.Elem().FieldByName("CodeSection")
	if code.Kind() != reflect.Slice {
		return 0, 0, false
	}
	for i := range code.Len() {
		body := code.Index(i).FieldByName("Body")
		if !body.IsValid() {
			return 0, 0, false
		}
		bytes += len(*(*[]byte)(unsafe.Pointer(body.UnsafeAddr())))
	}
	return code.Len(), bytes, true
}
