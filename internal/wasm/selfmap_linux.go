//go:build linux

package wasm

import (
	"bufio"
	"bytes"
	"os"

	"golang.org/x/sys/unix"
)

// The policy server's own binary is mapped like any executable: its text
// and read-only data are file pages, resident once touched. Starting the
// server touches far more of them than serving does (package
// initialisation, flag parsing, the compilers of CEL and Rego, the
// Kubernetes schemes, policy loading): about 50 MB of a 141 MB binary,
// a third of an idle server's RSS. Those pages are dropped from the
// resident set with the guest code's (releaseCode); they stay in the page
// cache, and what runs next faults its pages back, as for a shared
// library's text.
//
// The mappings are also marked MADV_RANDOM, which turns off the kernel's
// fault-around and read-ahead for them: a fault then maps the page it
// needs, not the 16 around it. What an idle server still reads is
// scattered: the garbage collector reads the type data of every live
// object's type, spread over the read-only data. With fault-around, the
// first collection after the release brought back 28.6 MB of the 53.8 MB
// of read-only data (20 policies over 8 modules); without it, 15.5 MB.
//
// Only mappings of the executable that hold no private copy of a page are
// dropped: a page the dynamic loader relocated (the GOT of a binary
// linked against libc, read-only after relocation) is an anonymous copy,
// which MADV_DONTNEED would replace with the file's unrelocated bytes.
// smaps counts such copies under "Anonymous"; a mapping with none is file
// pages only, and the text and rodata of a Go binary are never written.

// releaseOwnFileMappings drops the resident pages of the executable's
// read-only mappings and turns off fault-around for them. The caller holds
// codeMu.
func releaseOwnFileMappings() {
	for _, r := range ownFileMappings() {
		_ = r.madvise(unix.MADV_RANDOM)
		_ = r.madvise(unix.MADV_DONTNEED) // file pages only: nothing is lost
	}
}

// ownFileMappings returns the read-only mappings of the running
// executable whose resident pages are all file pages, in address order, or
// none when /proc cannot be read.
func ownFileMappings() []codeRegion {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil
	}
	return fileMappingsOf(smaps, exe)
}

// fileMappingsOf returns the r-xp and r--p mappings of path in smaps (the
// text of /proc/<pid>/smaps) that hold no anonymous page.
func fileMappingsOf(smaps []byte, path string) []codeRegion {
	var regions []codeRegion
	var cur codeRegion
	own := false // the mapping being read is a read-only mapping of path
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("Anonymous:")); ok {
			if own && string(bytes.TrimSpace(v)) == "0 kB" {
				regions = append(regions, cur)
			}
			own = false
			continue
		}
		// A mapping starts with "start-end perms offset dev inode path"
		// (the lines of figures have fewer fields); a path with spaces, or
		// one the kernel marks "(deleted)", has more, and is left alone.
		f := bytes.Fields(line)
		if len(f) != 6 || bytes.IndexByte(f[0], '-') < 0 {
			continue
		}
		own = false
		if perms := string(f[1]); (perms == "r-xp" || perms == "r--p") && string(f[5]) == path {
			cur, own = parseRegion(f[0])
		}
	}
	return regions
}
