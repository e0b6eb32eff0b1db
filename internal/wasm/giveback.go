package wasm

import (
	"runtime/debug"
	"sync"
	"time"
)

// A guest call that fails may leave behind much memory of the Go heap:
// wazero grows a call's stack on the heap (a guest that recurses without
// bound grows it to wazero's limit, hundreds of MiB, before the "stack
// overflow" trap), and the instance is then dropped. The Go runtime would
// give those pages back to the OS only slowly; a burst of such calls kept
// hundreds of MiB resident. So a failed call asks for the memory back
// (giveBack.request): a collection and the return of the free pages
// (debug.FreeOSMemory) at once, or, when one ran less than
// giveBackInterval ago, once that interval has passed, however many calls
// failed meanwhile.

// giveBackInterval is the least time between two returns of memory.
const giveBackInterval = 2 * time.Second

// giveBack runs debug.FreeOSMemory when asked, at most once per
// giveBackInterval. The zero value is ready; it is safe for concurrent use.
type giveBack struct {
	mu      sync.Mutex
	last    time.Time // the last return began
	pending bool      // a return is scheduled
	runs    int       // returns run, for tests
}

// request asks for a return of memory, now or after the interval.
func (g *giveBack) request() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending {
		return
	}
	g.pending = true
	wait := time.Until(g.last.Add(giveBackInterval))
	time.AfterFunc(max(wait, 0), g.run)
}

func (g *giveBack) run() {
	g.mu.Lock()
	g.last, g.pending = time.Now(), false
	g.runs++
	g.mu.Unlock()
	debug.FreeOSMemory()
}

// memoryReturns is how many times the runtime gave memory back after
// failed calls. It exists for tests.
func (r *Runtime) memoryReturns() int {
	r.giveBack.mu.Lock()
	defer r.giveBack.mu.Unlock()
	return r.giveBack.runs
}
