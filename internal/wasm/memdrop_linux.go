//go:build linux

package wasm

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// dropAbove empties the memory's bytes from off (a multiple of the wasm page
// size) to size: they read as zero again, as memory a guest grows does, and
// hold no RAM until written.
func (m *linearMemory) dropAbove(off, size uint64) error {
	if off >= size {
		return nil
	}
	if err := unix.Madvise(m.region[off:size], unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("dropping guest memory: %w", err)
	}
	return nil
}
