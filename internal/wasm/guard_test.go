package wasm

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

// testGlobal is a mutable global outside any instance, for a test of the
// synchronisation around it alone. The embedded interface only satisfies
// wazero's marker method; it is never called.
type testGlobal struct {
	api.MutableGlobal
	v atomic.Uint64
}

func (g *testGlobal) Type() api.ValueType { return api.ValueTypeI32 }
func (g *testGlobal) Get() uint64         { return g.v.Load() }
func (g *testGlobal) Set(v uint64)        { g.v.Store(v) }
func (g *testGlobal) String() string      { return "test global" }

// TestGuardDoneWaitsForTheDeadline checks that a deadline that fires as the
// guest call returns has finished with the instance's globals once done
// returns: the caller restores them right after, for the next call, which
// must not start interrupted (it failed with "guest call interrupted:
// %!w(<nil>)" when it did).
func TestGuardDoneWaitsForTheDeadline(t *testing.T) {
	flag, budget := &testGlobal{}, &testGlobal{}
	it := &interruptible{flag: flag, budget: budget}
	for i := range 20000 {
		ctx, cancel := context.WithCancel(context.Background())
		done := it.guard(ctx)
		cancel() // the deadline fires while the call returns
		interrupted := done()
		flag.Set(0) // the caller restores the globals
		budget.Set(0)
		runtime.Gosched()
		if flag.Get() != 0 || budget.Get() != 0 {
			t.Fatalf("call %d: the deadline set the flag after done returned (done said interrupted=%v)", i, interrupted)
		}
		next, stop := context.WithCancel(context.Background())
		if it.guard(next)() {
			t.Fatalf("call %d: the next call, whose deadline did not fire, reports an interruption", i)
		}
		stop()
	}
}
