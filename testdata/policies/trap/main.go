//go:build wasip1

// Command trap is a waPC policy whose validate operation hits a genuine wasm
// trap: it loads a byte from an address past the end of linear memory, so the
// wasm load instruction itself faults ("out of bounds memory access") instead
// of the Go runtime panicking and exiting. validate_settings accepts anything.
package main

import (
	"unsafe"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

// main never runs: the policy is a c-shared reactor (see package wapc).
func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          validate,
		"validate_settings": func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	})
}

// sink keeps the load from being optimised away.
var sink byte

func validate([]byte) ([]byte, error) {
	// Go's wasm port addresses memory with the low 32 bits of a pointer, so
	// this reads at 0xfffffff0: beyond any memory the host lets the module
	// have (Go never grows it near 4 GiB), and not nil, so the compiler's nil
	// check passes and the load traps.
	p := (*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(0xfffffff0)))
	sink = *p
	return protocol.Accept(), nil
}
