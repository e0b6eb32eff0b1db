//go:build !linux

package wasm

// Outside Linux a snapshot is a plain copy and a reset copies all of it back:
// correct, only slower than the copy-on-write scheme of snapshot_linux.go.

type memSnapshot struct {
	size int
	view []byte
}

type linearMemory struct {
	buf  []byte
	max  int
	snap *memSnapshot
}

func newLinearMemory(max uint64, snap *memSnapshot) (*linearMemory, error) {
	m := &linearMemory{max: int(max)}
	if snap != nil {
		m.buf = make([]byte, snap.size)
		copy(m.buf, snap.view)
		m.snap = snap
	}
	return m, nil
}

// Reallocate implements experimental.LinearMemory.
func (m *linearMemory) Reallocate(size uint64) []byte {
	if int(size) > m.max {
		return nil
	}
	if int(size) <= cap(m.buf) {
		m.buf = m.buf[:size]
		return m.buf
	}
	nb := make([]byte, size, max(int(size), min(2*cap(m.buf), m.max)))
	copy(nb, m.buf)
	m.buf = nb
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *linearMemory) Free() { m.buf = nil }

func takeSnapshot(m *linearMemory, size int) (*memSnapshot, error) {
	snap := &memSnapshot{size: size, view: append([]byte(nil), m.buf[:size]...)}
	m.snap = snap
	return snap, nil
}

func (s *memSnapshot) release() { s.view = nil }

func (m *linearMemory) reset() error {
	copy(m.buf[:m.snap.size], m.snap.view)
	return nil
}

func (m *linearMemory) remap() error { return m.reset() }
