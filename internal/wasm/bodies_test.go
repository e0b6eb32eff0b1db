package wasm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/wasm"
)

// TestDropFunctionBodies checks that a compiled module keeps no wasm code
// (bodies.go), and still runs. It fails when a wazero upgrade moves the
// fields dropFunctionBodies clears.
func TestDropFunctionBodies(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	m := compile(t, rt, "labels")
	functions, bytes, ok := wasm.FunctionBodyBytes(m)
	if !ok {
		t.Fatal("wazero's compiled module is not laid out as dropFunctionBodies expects (bodies.go)")
	}
	if functions == 0 {
		t.Fatal("the compiled module lists no function")
	}
	if bytes != 0 {
		t.Fatalf("the compiled module still holds %d bytes of function bodies over %d functions", bytes, functions)
	}
	w, err := rt.NewWapc(t.Context(), m, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(t.Context())
	out, err := w.Call(withTimeout(t, 10*time.Second), nil, "validate", []byte(podRequest))
	if err != nil {
		t.Fatalf("evaluating with the bodies dropped: %v", err)
	}
	if want := `"label env is denied"`; !strings.Contains(string(out), want) {
		t.Fatalf("got %s, want it to contain %s", out, want)
	}
}
