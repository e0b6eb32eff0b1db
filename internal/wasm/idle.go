package wasm

import "sync"

// idleSet keeps up to max instances between calls, for the pools of this
// package. It is safe for concurrent use; the instances it holds are used by
// nobody.
type idleSet[T any] struct {
	mu     sync.Mutex
	items  []T
	max    int
	closed bool
}

func newIdleSet[T any](max int) idleSet[T] {
	return idleSet[T]{max: max}
}

// take removes and returns an idle instance, if there is one: the most
// recently kept of those prefer accepts, or else the most recently kept.
// prefer may be nil.
func (s *idleSet[T]) take(prefer func(T) bool) (in T, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.items)
	if n == 0 {
		return in, false
	}
	i := n - 1
	if prefer != nil {
		for j := n - 1; j >= 0; j-- {
			if prefer(s.items[j]) {
				i = j
				break
			}
		}
	}
	in = s.items[i]
	copy(s.items[i:], s.items[i+1:])
	var zero T
	s.items[n-1] = zero
	s.items = s.items[:n-1]
	return in, true
}

// keep stores in for a later call. It reports false when the set is closed
// or full: the caller then closes in.
func (s *idleSet[T]) keep(in T) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.items) >= s.max {
		return false
	}
	s.items = append(s.items, in)
	return true
}

// drain closes the set and returns what it held, for the caller to close.
func (s *idleSet[T]) drain() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.items
	s.items, s.closed = nil, true
	return items
}

// keptGrowth bounds how much a call may have grown an instance's memory for
// the instance to be kept for the next call, beyond what the instance needs
// between calls (its baseline: a waPC module's snapshot, an OPA module with
// its data loaded): the larger of keptGrowth and the baseline itself. The
// memory of idle instances is therefore at most about twice their baseline
// plus keptGrowth each, and the idle set bounds how many there are. A call
// that needs more than that, a one-off huge request, leaves an instance that
// is closed rather than kept.
const keptGrowth = 16 << 20

// droppedGrowth is keptGrowth for an instance whose memory above its
// baseline is given back to the system when it is kept (a waPC instance:
// dropAbove), so that the bound is on address space, not memory. It is
// larger: a Go guest handed a 1 MB host-call answer grows its heap by about
// 18 MB, and closing its instance for that made the next call instantiate
// the module again (a quarter of the CPU of such a policy).
const droppedGrowth = 64 << 20

// keepGrown reports whether an instance whose memory is size bytes, of which
// its baseline needs base, may be kept, growth being keptGrowth or
// droppedGrowth.
func keepGrown(size, base, growth uint64) bool {
	return size <= base+max(base, growth)
}
