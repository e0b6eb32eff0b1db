package wasm

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// guestState is what a pooled instance is put back to after each call: its
// linear memory, which is Warden's own so that the pages a call wrote can be
// found, and its mutable globals, which Compile exports. It also carries the
// interrupt flag that bounds the instance's calls. The waPC and WASI pools
// embed it.
type guestState struct {
	interruptible
	mem     *linearMemory // set by the allocator of withMemory
	globals []api.MutableGlobal
}

// withMemory returns ctx set so that the next instantiation allocates
// s.mem, a copy-on-write mapping of snap when given. wazero surfaces a failed
// allocation as a panic; *allocErr keeps its cause.
func (s *guestState) withMemory(ctx context.Context, snap *memSnapshot, allocErr *error) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		s.mem, *allocErr = newLinearMemory(max, snap)
		if *allocErr != nil {
			panic(*allocErr)
		}
		return s.mem
	}))
}

// bind finds the interrupt flag and the exported mutable globals of mod, an
// instance of m.
func (s *guestState) bind(mod api.Module, m *Module) error {
	if err := s.interruptible.bind(mod, m); err != nil {
		return err
	}
	for _, name := range m.globals {
		g, ok := mod.ExportedGlobal(name).(api.MutableGlobal)
		if !ok {
			return fmt.Errorf("global export %s is missing", name)
		}
		s.globals = append(s.globals, g)
	}
	return nil
}

// saveGlobals returns the values of the globals, in m.globals order, with
// the interrupt flag as 0: a deadline may be setting it right now, and a
// restored instance must start uninterrupted.
func (s *guestState) saveGlobals(m *Module) []uint64 {
	values := make([]uint64, len(s.globals))
	for i, g := range s.globals {
		if m.globals[i] != m.interrupt {
			values[i] = g.Get()
		}
	}
	return values
}

// restore puts the memory back to its snapshot and the globals to values.
func (s *guestState) restore(values []uint64) error {
	if err := s.mem.reset(); err != nil {
		return err
	}
	s.setGlobals(values)
	return nil
}

// start puts a new instance in the snapshot state. Its instantiation wrote
// the data segments over the snapshot mapping; mapping it afresh, rather
// than copying back what was written, keeps those pages out of every later
// reset.
func (s *guestState) start(values []uint64) error {
	if err := s.mem.remap(); err != nil {
		return err
	}
	s.setGlobals(values)
	return nil
}

func (s *guestState) setGlobals(values []uint64) {
	for i, g := range s.globals {
		g.Set(values[i])
	}
}

// startFrom puts an instance, mod, whose memory's snapshot (s.mem.snap) is
// pages wasm pages, in the snapshot's state: it grows the memory to the
// snapshot's size, which a new instance's instantiation did not, and maps
// the snapshot afresh with the globals set to values (start).
func (s *guestState) startFrom(mod api.Module, pages uint32, values []uint64) error {
	if err := growTo(mod.Memory(), pages); err != nil {
		return err
	}
	return s.start(values)
}

// growTo grows mem to at least pages wasm pages.
func growTo(mem api.Memory, pages uint32) error {
	if size := mem.Size() / pageSize; size < pages {
		if _, ok := mem.Grow(pages - size); !ok {
			return errors.New("cannot grow the instance's memory to the snapshot size")
		}
	}
	return nil
}
