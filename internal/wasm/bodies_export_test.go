package wasm

// FunctionBodyBytes returns how many functions m's compiled module lists
// and the bytes of wasm code it still holds for them, read where
// dropFunctionBodies clears them; ok is false when wazero is not laid out
// that way.
func FunctionBodyBytes(m *Module) (functions, bytes int, ok bool) {
	bodies, ok := functionBodies(m.compiled)
	for _, body := range bodies {
		bytes += len(*body)
	}
	return len(bodies), bytes, ok
}
