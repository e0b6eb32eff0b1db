package wasm

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recursing is a waPC-shaped module whose __guest_call calls a function
// that calls itself without end: wazero grows the call's stack until it
// traps with "stack overflow".
func recursing() []byte {
	return assemble(
		[]byte{sectionType, 2, 0x60, 0, 0, 0x60, 2, 0x7f, 0x7f, 1, 0x7f},
		[]byte{sectionFunction, 2, 0, 1},
		[]byte{sectionMemory, 1, 0x00, 0x01},
		append(append([]byte{sectionExport, 2, 12}, "__guest_call"...), append([]byte{0x00, 1, 6}, append([]byte("memory"), 0x02, 0)...)...),
		[]byte{sectionCode, 2,
			4, 0x00, 0x10, 0x00, 0x0b, // f0: call f0
			6, 0x00, 0x10, 0x00, 0x41, 0x01, 0x0b, // f1: call f0; i32.const 1
		},
	)
}

// TestFailedCallGivesMemoryBack checks that a call that fails (here a stack
// overflow, which grows wazero's stack on the Go heap to its limit) has
// the runtime return memory to the OS afterwards. docs/benchmarks.md has
// the resident memory this keeps from growing.
func TestFailedCallGivesMemoryBack(t *testing.T) {
	rt, err := NewRuntime(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	m, err := rt.Compile(context.Background(), recursing())
	if err != nil {
		t.Fatal(err)
	}
	w, err := rt.NewWapc(context.Background(), m, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	before, heapBefore := rt.memoryReturns(), heapInUse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := w.Call(ctx, nil, "validate", nil); err == nil || !strings.Contains(err.Error(), "stack overflow") {
		t.Fatalf("error = %v, want a stack overflow", err)
	}
	deadline := time.Now().Add(time.Minute) // bounds the wait only
	for rt.memoryReturns() == before {
		if time.Now().After(deadline) {
			t.Fatal("no memory was given back after the failed call")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The instance is kept (Wapc.putFailed), but not the stack the call
	// grew: a collection finds the heap about as it was.
	if live := heapInUse(); live > heapBefore+32<<20 {
		t.Errorf("%d MiB of heap in use after the stack overflow, %d MiB before: the grown stack is still held", live>>20, heapBefore>>20)
	}
	if n := rt.LiveInstances(); n != 1 {
		t.Errorf("%d live instances after the stack overflow, want the one kept", n)
	}
}

// heapInUse is the Go heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
