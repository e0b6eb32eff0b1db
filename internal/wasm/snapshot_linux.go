//go:build linux

package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux keeps a snapshot in a memfd and maps it copy-on-write (MAP_PRIVATE)
// at the start of every instance's memory reservation. Pages a call writes
// become private anonymous copies; the page map tells which (PAGEMAP_SCAN
// lists them; on kernels before 6.7, /proc/self/pagemap entries without bit
// 61, "file page or shared anon"), so a reset copies back only those pages.
// Untouched pages keep sharing the page cache, so N instances of a module
// cost little more memory than one.
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
	ranges []pageRange // scratch of privateRanges
	scan   *pageScan   // scratch of scanPageMap
	pm     []byte      // scratch of readPageMap, one entry per OS page of the snapshot
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

// reset puts the snapshot's bytes back. The memory must not have grown.
func (m *linearMemory) reset() error {
	ranges, err := m.privateRanges()
	if errors.Is(err, errNoPageMap) {
		copy(m.region[:m.snap.size], m.snap.view)
		return nil
	}
	if err != nil {
		return err
	}
	private := 0
	for _, r := range ranges {
		private += (r.end - r.start) / osPageSize
	}
	if m.usual > 0 && private > 2*m.usual+16 {
		return m.remap()
	}
	if m.usual == 0 {
		m.usual = max(private, 1)
	}
	for _, r := range ranges {
		copy(m.region[r.start:r.end], m.snap.view[r.start:r.end])
	}
	return nil
}

// pageRange is a run of private pages, as byte offsets into the memory.
type pageRange struct{ start, end int }

var errNoPageMap = errors.New("/proc/self/pagemap cannot be read")

// privateRanges returns the runs of the snapshot's pages that are the
// process's own (written since the snapshot was mapped) rather than the page
// cache's. The result is valid until the next call.
func (m *linearMemory) privateRanges() ([]pageRange, error) {
	pm := pagemap()
	if pm == nil {
		return nil, errNoPageMap
	}
	m.ranges = m.ranges[:0]
	if !noPagemapScan.Load() {
		ok, err := m.scanPageMap(pm)
		if ok || err != nil {
			return m.ranges, err
		}
		noPagemapScan.Store(true)
	}
	return m.ranges, m.readPageMap(pm)
}

var pagemap = sync.OnceValue(func() *os.File {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil // resets fall back to copying the whole snapshot
	}
	return f
})

// noPagemapScan is set once a scan finds the kernel without the
// PAGEMAP_SCAN ioctl (before Linux 6.7).
var noPagemapScan atomic.Bool

// PAGEMAP_SCAN (include/uapi/linux/fs.h, Documentation/admin-guide/mm/pagemap.rst).
const (
	ioctlPagemapScan = 0xc0606610 // _IOWR('f', 16, struct pm_scan_arg)
	pageIsFile       = 1 << 2
	pageIsPresent    = 1 << 3
	pageIsSwapped    = 1 << 4
)

// pmScanArg is struct pm_scan_arg.
type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages       uint64
	categoryInverted, categoryMask, categoryAnyofMask, returnMask uint64
}

// pageRegion is struct page_region.
type pageRegion struct{ start, end, categories uint64 }

// pageScan is the argument and the output buffer of PAGEMAP_SCAN. The
// argument holds the buffer's address as an integer, so both live on the
// heap, where nothing moves them; on a goroutine stack, a stack growth
// between filling the argument and the call would leave the kernel writing
// into freed stack.
type pageScan struct {
	arg pmScanArg
	out [32]pageRegion
}

// scanPageMap asks the kernel for the runs of private pages: those not
// file-backed and either present or swapped out. ok is false when the
// kernel does not know the ioctl.
func (m *linearMemory) scanPageMap(pm *os.File) (ok bool, err error) {
	if m.scan == nil {
		m.scan = new(pageScan)
	}
	s := m.scan
	base := uint64(uintptr(unsafe.Pointer(&m.region[0])))
	s.arg = pmScanArg{
		size:              uint64(unsafe.Sizeof(pmScanArg{})),
		start:             base,
		end:               base + uint64(m.snap.size),
		vec:               uint64(uintptr(unsafe.Pointer(&s.out[0]))),
		vecLen:            uint64(len(s.out)),
		categoryInverted:  pageIsFile,
		categoryMask:      pageIsFile,
		categoryAnyofMask: pageIsPresent | pageIsSwapped,
		returnMask:        pageIsPresent | pageIsSwapped,
	}
	for s.arg.start < s.arg.end {
		n, _, errno := unix.Syscall(unix.SYS_IOCTL, pm.Fd(), ioctlPagemapScan, uintptr(unsafe.Pointer(&s.arg)))
		if errno == unix.ENOTTY || (errno == unix.EINVAL && len(m.ranges) == 0) {
			return false, nil
		}
		if errno != 0 {
			return false, fmt.Errorf("scanning page map: %w", errno)
		}
		for _, r := range s.out[:n] {
			m.ranges = append(m.ranges, pageRange{int(r.start - base), int(r.end - base)})
		}
		s.arg.start = s.arg.walkEnd
	}
	return true, nil
}

// Page map entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent  = 1 << 63
	pmSwapped  = 1 << 62
	pmFilePage = 1 << 61
)

// readPageMap reads the page map entries of the snapshot's pages, one 64-bit
// word per page, for kernels without PAGEMAP_SCAN.
func (m *linearMemory) readPageMap(pm *os.File) error {
	if m.pm == nil {
		m.pm = make([]byte, m.snap.size/osPageSize*8)
	}
	base := uintptr(unsafe.Pointer(&m.region[0])) / osPageSize * 8
	if _, err := pm.ReadAt(m.pm, int64(base)); err != nil {
		return fmt.Errorf("reading page map: %w", err)
	}
	for i := 0; i < len(m.pm); i += 8 {
		e := binary.LittleEndian.Uint64(m.pm[i:])
		if e&pmSwapped == 0 && (e&pmPresent == 0 || e&pmFilePage != 0) {
			continue
		}
		off := i / 8 * osPageSize
		if n := len(m.ranges); n > 0 && m.ranges[n-1].end == off {
			m.ranges[n-1].end += osPageSize
		} else {
			m.ranges = append(m.ranges, pageRange{off, off + osPageSize})
		}
	}
	return nil
}
