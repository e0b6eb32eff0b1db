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

// take removes and returns an idle instance, if there is one.
func (s *idleSet[T]) take() (in T, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.items); n > 0 {
		in, s.items = s.items[n-1], s.items[:n-1]
		return in, true
	}
	return in, false
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
