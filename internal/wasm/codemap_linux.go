//go:build linux

package wasm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// wazero writes a module's machine code into anonymous memory. Those pages
// are dirty: resident for the life of the process whether the code runs or
// not, and a module built with stock Go compiles to 7-14 MB of it. Moved
// into a file mapping, the code is demand-paged like a shared library's
// text (or like wasmtime's modules mapped from its cache): only the pages
// that run are resident, the kernel may drop them under pressure and read
// them back, and releaseCode can drop the pages that only initialisation
// ran. The file is unlinked as soon as it is mapped, so nothing is left
// behind, and it should be on a disk: on a tmpfs the pages stay in memory,
// only out of the process's RSS.
//
// The code is found from the compiled module (codeaddr.go), and replaced
// in place with MAP_FIXED by a private mapping of a file holding the same
// bytes. Nothing changes for wazero, which unmaps it as before. The module
// is held by its caller, so its code cannot be unmapped meanwhile, and
// wazero maps each piece of code on its own, so the pages replaced hold
// nothing else.
//
// When wazero is not laid out as codeaddr.go expects, the code is found as
// the anonymous executable mappings that appear while wazero compiles a
// module (the Go runtime makes none; compileMu and codeMu keep every other
// wazero mapping from appearing at the same time: codeMapper).
//
// Telling the new mappings apart takes care. wazero unmaps code from
// finalizers, which run when the garbage collector says, outside codeMu;
// the kernel reuses the addresses so freed, merges adjacent anonymous
// mappings, and splits one when part of it is unmapped. So neither the
// addresses of a mapping nor those of its pages say whether it is new.
// Before a compilation every anonymous executable mapping is marked with
// MADV_NOHUGEPAGE (smaps lists it as "nh"; machine code has no use for
// huge pages): what is unmarked after it is the new module's, which its
// caller holds, and a marked mapping never merges with an unmarked one.
// A kernel without transparent huge pages refuses the mark. Then the new
// code is the pages that were not executable before, and code mapped where
// a finalizer just freed some stays anonymous: resident, but correct.

// madvise is madvise(2) on a region known only by its address.
func (r codeRegion) madvise(advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.len(), uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

func (r codeRegion) len() uintptr { return r.end - r.start }

// execMapping is an anonymous executable mapping of the process.
type execMapping struct {
	codeRegion
	marked bool // MADV_NOHUGEPAGE: there before the compilation
}

// anonExecMappings returns the anonymous executable mappings of the
// process, in address order.
func anonExecMappings() ([]execMapping, error) {
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	var mappings []execMapping
	anon := false // the mapping being read is one
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Bytes()
		if flags, ok := bytes.CutPrefix(line, []byte("VmFlags:")); ok {
			if anon {
				mappings[len(mappings)-1].marked = slices.ContainsFunc(bytes.Fields(flags), func(f []byte) bool { return string(f) == "nh" })
			}
			anon = false
			continue
		}
		// A mapping starts with "start-end perms offset dev inode [path]",
		// without a path if anonymous; the lines of figures have fewer
		// fields.
		f := bytes.Fields(line)
		if len(f) < 5 {
			continue
		}
		anon = len(f) == 5 && string(f[1]) == "r-xp" && string(f[4]) == "0"
		if !anon {
			continue
		}
		r, ok := parseRegion(f[0])
		if !ok {
			return nil, fmt.Errorf("reading /proc/self/smaps: bad mapping %q", f[0])
		}
		mappings = append(mappings, execMapping{codeRegion: r})
	}
	return mappings, sc.Err()
}

// parseRegion parses the "start-end" address range that begins a mapping's
// line in /proc/self/maps or smaps.
func parseRegion(field []byte) (codeRegion, bool) {
	start, end, _ := bytes.Cut(field, []byte("-"))
	s, err1 := strconv.ParseUint(string(start), 16, 64)
	e, err2 := strconv.ParseUint(string(end), 16, 64)
	if err1 != nil || err2 != nil {
		return codeRegion{}, false
	}
	return codeRegion{uintptr(s), uintptr(e)}, true
}

func regionsOf(mappings []execMapping) []codeRegion {
	out := make([]codeRegion, len(mappings))
	for i, m := range mappings {
		out[i] = m.codeRegion
	}
	return out
}

// newPages returns the parts of the regions in now that lie outside every
// region of before. Both are in address order and without overlaps, as
// /proc/self/maps lists them.
func newPages(now, before []codeRegion) []codeRegion {
	var out []codeRegion
	for _, r := range now {
		start := r.start
		for _, b := range before {
			if b.end <= start || b.start >= r.end {
				continue
			}
			if b.start > start {
				out = append(out, codeRegion{start, b.start})
			}
			start = max(start, b.end)
		}
		if start < r.end {
			out = append(out, codeRegion{start, r.end})
		}
	}
	return out
}

// codeMapper moves the code of one compilation into files, found by its
// mappings. Calls must hold compileMu and codeMu from before the
// compilation to after moved.
type codeMapper struct {
	before []codeRegion // the anonymous executable mappings
	marked bool         // all of them carry the mark
	err    error
}

func newCodeMapper() *codeMapper {
	mappings, err := anonExecMappings()
	c := &codeMapper{before: regionsOf(mappings), marked: true, err: err}
	for _, m := range mappings {
		if m.marked {
			continue
		}
		// ENOMEM: a finalizer unmapped some of it since it was read, and
		// what is left is marked. Anything else (EINVAL: a kernel without
		// transparent huge pages) leaves comparing pages.
		if err := m.madvise(unix.MADV_NOHUGEPAGE); err != nil && !errors.Is(err, unix.ENOMEM) {
			c.marked = false
		}
	}
	return c
}

// moved maps the code that appeared since newCodeMapper from unlinked files
// in dir, and returns the regions moved. Regions it could not move stay
// anonymous, which is correct, only resident.
func (c *codeMapper) moved(dir string) ([]codeRegion, error) {
	if c.err != nil {
		return nil, c.err
	}
	now, err := anonExecMappings()
	if err != nil {
		return nil, err
	}
	var fresh []codeRegion
	if c.marked {
		for _, m := range now {
			if !m.marked {
				fresh = append(fresh, m.codeRegion)
			}
		}
	} else {
		fresh = newPages(regionsOf(now), c.before)
	}
	return moveRegions(dir, fresh)
}

// moveRegions maps regions, anonymous machine code that the caller holds,
// from unlinked files in dir, and returns the regions moved. Regions it
// could not move stay anonymous, which is correct, only resident.
func moveRegions(dir string, regions []codeRegion) ([]codeRegion, error) {
	var moved []codeRegion
	for _, r := range regions {
		if err := fileBackRegion(dir, r); err != nil {
			return moved, err
		}
		moved = append(moved, r)
	}
	return moved, nil
}

func fileBackRegion(dir string, r codeRegion) error {
	f, err := os.CreateTemp(dir, "warden-code-*")
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return err
	}
	// Page by page, so that the page cache holds small folios: a fault then
	// maps the pages around the one that ran, not a 2 MiB folio. The pages
	// are written straight from the region, which is mapped readable and
	// held by the caller (write(2) on its address: the region is not Go
	// memory).
	for off := r.start; off < r.end; {
		n := min(osPageSize, r.end-off)
		w, _, errno := unix.Syscall(unix.SYS_WRITE, f.Fd(), off, n)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("writing machine code: %w", errno)
		}
		if w == 0 {
			return fmt.Errorf("writing machine code: %w", io.ErrShortWrite)
		}
		off += w
	}
	if _, _, errno := unix.Syscall6(unix.SYS_MMAP, r.start, r.len(), unix.PROT_READ|unix.PROT_EXEC,
		unix.MAP_PRIVATE|unix.MAP_FIXED, f.Fd(), 0); errno != 0 {
		return fmt.Errorf("mapping machine code: %w", errno)
	}
	return r.madvise(unix.MADV_NOHUGEPAGE)
}

// releaseRegions drops the pages of file-backed code from the process's
// page tables. They stay in the page cache, and code that runs faults its
// pages back in. The caller holds codeMu, and the regions are mapped.
func releaseRegions(regions []codeRegion) {
	for _, r := range regions {
		_ = r.madvise(unix.MADV_DONTNEED) // clean file pages: nothing is lost
	}
}
