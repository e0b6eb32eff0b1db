package wasm

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"
)

// TestReleaseFreesTheModule checks what the removal of a policy's module
// leaves behind once its last reference is released: the runtime no
// longer holds the module, a collection finds it unreachable, and the
// runtime gives memory back to the OS (the decoded and compiled copies of
// a large module are hundreds of MiB of heap; docs/benchmarks.md has the
// resident memory over 20 cycles of a 250 MB module).
func TestReleaseFreesTheModule(t *testing.T) {
	ctx := context.Background()
	rt, err := NewRuntime(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	m, err := rt.Compile(ctx, recursing())
	if err != nil {
		t.Fatal(err)
	}
	w, err := rt.NewWapc(ctx, m, 1)
	if err != nil {
		t.Fatal(err)
	}
	w.Close(ctx)
	module := weak.Make(m)
	before := rt.memoryReturns()
	rt.Release(ctx, m)
	m = nil

	if n := rt.CompiledModules(); n != 0 {
		t.Errorf("%d modules compiled after the release, want 0", n)
	}
	if n := rt.LiveInstances(); n != 0 {
		t.Errorf("%d live instances after the release, want 0", n)
	}
	runtime.GC()
	if module.Value() != nil {
		t.Error("the released module is still reachable")
	}
	deadline := time.Now().Add(time.Minute) // bounds the wait only
	for rt.memoryReturns() == before {
		if time.Now().After(deadline) {
			t.Fatal("no memory was given back after the module was released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
