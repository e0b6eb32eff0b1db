//go:build linux

package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux keeps a snapshot in a memfd and maps it copy-on-write (MAP_PRIVATE)
// at the start of every instance's memory reservation. Pages a call writes
// become private anonymous copies; /proc/self/pagemap tells which, so a reset
// copies back only those pages (bit 61 "file page or shared anon" is clear
// for them). Untouched pages keep sharing the page cache, so N instances of a
// module cost little more memory than one.
//
// Pages copied back stay private, so a reset copies the union of the pages
// calls wrote since the snapshot was last mapped: for a deterministic guest
// that is about what one call writes. A call that wrote many more pages than
// usual (a large request) would make every later reset dearer, so when a
// reset finds more than twice the usual number of private pages it maps the
// snapshot afresh instead of copying, and the union starts again from empty.

const osPageSize = 4096

// memSnapshot is the initialised memory of a module, shared by its instances.
type memSnapshot struct {
	size int    // bytes, a multiple of the wasm page size
	fd   int    // memfd holding the bytes
	view []byte // read-only shared mapping of fd, the source of resets
}

// linearMemory is a wasm memory backed by a private mmap reservation of the
// memory limit; only touched pages use RAM.
type linearMemory struct {
	region []byte
	snap   *memSnapshot
	pm     []byte // pagemap scratch, one entry per OS page of the snapshot
	// usual is the number of private pages the first reset after a fresh
	// mapping found: about what one call writes. Zero before that reset.
	usual int
}

func newLinearMemory(max uint64, snap *memSnapshot) (*linearMemory, error) {
	reserve := (int(max) + osPageSize - 1) &^ (osPageSize - 1)
	if snap != nil && reserve < snap.size {
		reserve = snap.size
	}
	if reserve == 0 {
		reserve = osPageSize
	}
	region, err := unix.Mmap(-1, 0, reserve, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("reserving %d bytes of guest memory: %w", reserve, err)
	}
	m := &linearMemory{region: region}
	if snap != nil {
		if err := m.mapSnapshot(snap); err != nil {
			m.Free()
			return nil, err
		}
	}
	return m, nil
}

func (m *linearMemory) mapSnapshot(snap *memSnapshot) error {
	_, _, errno := unix.Syscall6(unix.SYS_MMAP, uintptr(unsafe.Pointer(&m.region[0])), uintptr(snap.size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED, uintptr(snap.fd), 0)
	if errno != 0 {
		return fmt.Errorf("mapping memory snapshot: %w", errno)
	}
	m.snap = snap
	if m.pm == nil {
		m.pm = make([]byte, snap.size/osPageSize*8)
	}
	m.usual = 0
	return nil
}

// remap maps the snapshot afresh over the memory, dropping every private
// page: the next call starts sharing the page cache again. For a new
// instance, whose instantiation wrote the data segments, this is the reset.
func (m *linearMemory) remap() error {
	return m.mapSnapshot(m.snap)
}

// Reallocate implements experimental.LinearMemory. The reservation never
// moves, so growing is just a longer slice.
func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.region)) {
		return nil
	}
	return m.region[:size]
}

// Free implements experimental.LinearMemory.
func (m *linearMemory) Free() {
	if m.region != nil {
		_ = unix.Munmap(m.region)
		m.region = nil
	}
}

// takeSnapshot saves the first size bytes of m as the module's snapshot and
// remaps them copy-on-write, so m itself becomes resettable.
func takeSnapshot(m *linearMemory, size int) (*memSnapshot, error) {
	fd, err := unix.MemfdCreate("warden-snapshot", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating memory snapshot: %w", err)
	}
	snap := &memSnapshot{size: size, fd: fd}
	fail := func(err error) (*memSnapshot, error) {
		snap.release()
		return nil, fmt.Errorf("creating memory snapshot: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(err)
	}
	for off := 0; off < size; {
		n, err := unix.Pwrite(fd, m.region[off:size], int64(off))
		if err != nil {
			return fail(err)
		}
		off += n
	}
	if snap.view, err = unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return fail(err)
	}
	if err := m.mapSnapshot(snap); err != nil {
		return fail(err)
	}
	return snap, nil
}

func (s *memSnapshot) release() {
	if s.view != nil {
		_ = unix.Munmap(s.view)
		s.view = nil
	}
	if s.fd >= 0 {
		_ = unix.Close(s.fd)
		s.fd = -1
	}
}

// Page map entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent  = 1 << 63
	pmSwapped  = 1 << 62
	pmFilePage = 1 << 61
)

var pagemap = sync.OnceValue(func() *os.File {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil // resets fall back to copying the whole snapshot
	}
	return f
})

// reset puts the snapshot's bytes back. The memory must not have grown.
func (m *linearMemory) reset() error {
	private, err := m.readPageMap()
	if errors.Is(err, errNoPageMap) {
		copy(m.region[:m.snap.size], m.snap.view)
		return nil
	}
	if err != nil {
		return err
	}
	if m.usual > 0 && private > 2*m.usual+16 {
		return m.remap()
	}
	if m.usual == 0 {
		m.usual = max(private, 1)
	}
	for i := 0; i < len(m.pm); i += 8 {
		if privatePage(binary.LittleEndian.Uint64(m.pm[i:])) {
			off := i / 8 * osPageSize
			copy(m.region[off:off+osPageSize], m.snap.view[off:off+osPageSize])
		}
	}
	return nil
}

var errNoPageMap = errors.New("/proc/self/pagemap cannot be read")

// readPageMap reads the page map entries of the snapshot's pages into m.pm
// and counts the private ones.
func (m *linearMemory) readPageMap() (private int, err error) {
	pm := pagemap()
	if pm == nil {
		return 0, errNoPageMap
	}
	base := uintptr(unsafe.Pointer(&m.region[0])) / osPageSize * 8
	if _, err := pm.ReadAt(m.pm, int64(base)); err != nil {
		return 0, fmt.Errorf("reading page map: %w", err)
	}
	for i := 0; i < len(m.pm); i += 8 {
		if privatePage(binary.LittleEndian.Uint64(m.pm[i:])) {
			private++
		}
	}
	return private, nil
}

// privatePage reports whether a page map entry is a page of the process's
// own (written since the snapshot was mapped) rather than the page cache's.
func privatePage(e uint64) bool {
	return e&pmSwapped != 0 || (e&pmPresent != 0 && e&pmFilePage == 0)
}
