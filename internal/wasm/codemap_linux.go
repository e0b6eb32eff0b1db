//go:build linux

package wasm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
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
// The code is found as the anonymous executable mappings that appear while
// wazero compiles a module (the Go runtime makes none; codeMu keeps every
// other wazero mapping from appearing at the same time), and replaced in
// place with MAP_FIXED by a private mapping of a file holding the same
// bytes. Nothing changes for wazero, which unmaps it as before.

// codeRegion is an address range of /proc/self/maps.
type codeRegion struct{ start, end uintptr }

func (r codeRegion) len() uintptr { return r.end - r.start }

// madvise is madvise(2) on a region known only by its address.
func (r codeRegion) madvise(advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.len(), uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

// anonExecRegions returns the anonymous executable mappings of the process.
func anonExecRegions() (map[codeRegion]bool, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	regions := map[codeRegion]bool{}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// start-end perms offset dev inode [path]; anonymous: no path.
		f := bytes.Fields(sc.Bytes())
		if len(f) != 5 || string(f[1]) != "r-xp" || string(f[4]) != "0" {
			continue
		}
		start, end, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(string(start), 16, 64)
		e, err2 := strconv.ParseUint(string(end), 16, 64)
		if err1 == nil && err2 == nil {
			regions[codeRegion{uintptr(s), uintptr(e)}] = true
		}
	}
	return regions, sc.Err()
}

// codeMapper moves the code of one compilation into files. Calls must hold
// codeMu from before the compilation to after moved.
type codeMapper struct {
	before map[codeRegion]bool
	err    error
}

func newCodeMapper() *codeMapper {
	before, err := anonExecRegions()
	return &codeMapper{before: before, err: err}
}

// moved maps the code that appeared since newCodeMapper from unlinked files
// in dir, and returns the regions moved. Regions it could not move stay
// anonymous, which is correct, only resident.
func (c *codeMapper) moved(dir string) ([]codeRegion, error) {
	if c.err != nil {
		return nil, c.err
	}
	now, err := anonExecRegions()
	if err != nil {
		return nil, err
	}
	var moved []codeRegion
	for r := range now {
		if c.before[r] {
			continue
		}
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
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return err
	}
	defer mem.Close()
	// Page by page, so that the page cache holds small folios: a fault then
	// maps the pages around the one that ran, not a 2 MiB folio.
	page := make([]byte, osPageSize)
	for off := r.start; off < r.end; off += osPageSize {
		n := min(osPageSize, int(r.end-off))
		if _, err := mem.ReadAt(page[:n], int64(off)); err != nil {
			return fmt.Errorf("reading machine code: %w", err)
		}
		if _, err := f.Write(page[:n]); err != nil {
			return fmt.Errorf("writing machine code: %w", err)
		}
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
